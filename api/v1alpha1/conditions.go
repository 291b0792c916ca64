package v1alpha1

// Condition types published in status.conditions.
const (
	// ConditionHeld is True while a holder is published with phase Held.
	ConditionHeld = "Held"
	// ConditionEtcdAvailable is False while the controller cannot reach etcd; held locks keep
	// their phase meanwhile.
	ConditionEtcdAvailable = "EtcdAvailable"
	// ConditionValid is False when the spec or the cluster is in a state only the controller
	// can judge wrong: a selector that matches no pod, an absent preferred holder, or a token
	// regression in etcd.
	ConditionValid = "Valid"
)

// Reasons used in conditions, Events and status.history. A term begins with Granted or
// Regranted and ends with one of the others.
const (
	// ReasonGranted means a new term was granted to an eligible candidate.
	ReasonGranted = "Granted"
	// ReasonRegranted means the lock's etcd key vanished and the published holder, still eligible,
	// was granted again with a new token.
	ReasonRegranted = "Regranted"
	// ReasonHolderTerminated means the holder's termination was attested (pod Succeeded or Failed,
	// every container terminated, or its node tainted out-of-service); next holder at once.
	ReasonHolderTerminated = "HolderTerminated"
	// ReasonHolderGone means the holder pod is NotFound, or its name now has another UID.
	ReasonHolderGone = "HolderGone"
	// ReasonHolderNotReady means the holder pod is not Running and Ready.
	ReasonHolderNotReady = "HolderNotReady"
	// ReasonHolderTerminating means the holder pod is being deleted.
	ReasonHolderTerminating = "HolderTerminating"
	// ReasonKeyVanished means the lock's etcd key disappeared and the holder is not eligible.
	ReasonKeyVanished = "KeyVanished"
	// ReasonSuspended means spec.suspend was set.
	ReasonSuspended = "Suspended"
	// ReasonDeleted means the DistributedLock is being deleted.
	ReasonDeleted = "Deleted"
	// ReasonPreempted means the preferred holder became eligible under strategy Preferred.
	ReasonPreempted = "Preempted"
	// ReasonSelectorChanged means the holder no longer matches spec.candidates.selector.
	ReasonSelectorChanged = "SelectorChanged"
	// ReasonStrategyChanged means spec.strategy changed while the lock was held.
	ReasonStrategyChanged = "StrategyChanged"
	// ReasonHolderRestarted means a container of the holder pod restarted since the grant
	// (another containerID or a higher restartCount): a restart never keeps a token. With
	// proof that the old process is gone the same pod was granted a new term at once;
	// without it the term went through Releasing and the full lock delay.
	ReasonHolderRestarted = "HolderRestarted"
	// ReasonHolderReleased means the holder pod confirmed that its work under the term stopped
	// (AnnotationHolderRelease naming the term's holder UID and token, as etcd records them):
	// the term ended at once, without the lock delay.
	ReasonHolderReleased = "HolderReleased"
	// ReasonOperatorRelease means an operator asked for the term to end (AnnotationReleaseRequest
	// naming its token): it went through Releasing and the full lock delay. The history entry's
	// message carries AnnotationReleaseReason.
	ReasonOperatorRelease = "OperatorRelease"
	// ReasonSlotRemoved means spec.slots was lowered below the slot's index: its term ended
	// through Releasing and the lock delay (or sooner, on proof that its holder stopped), and
	// the slot is then removed from status.slots.
	ReasonSlotRemoved = "SlotRemoved"
	// ReasonTokenRegression means etcd shows a token at or below status.maxFencingToken that is not
	// the published one, or the controller's epoch is below status.controllerEpoch (etcd was
	// restored from a backup without --bump-revision, or replaced). Nothing is granted.
	ReasonTokenRegression = "TokenRegression"
)

// Reasons used only in Events.
const (
	// ReasonReleaseRequestIgnored means an AnnotationReleaseRequest named a token that is not
	// the current term's (or could not be parsed): nothing changed.
	ReasonReleaseRequestIgnored = "ReleaseRequestIgnored"
	// ReasonStatusCorrupt: the status named another holder for its token than etcd's grant (a
	// hand edit of distributedlocks/status). The controller republishes etcd's holder as
	// Releasing (a pod the edit named may have led the token) and waits the full lock delay,
	// which nothing shortens; the reason is on the Event and the term's history entry.
	ReasonStatusCorrupt = "StatusCorrupt"
)

// Reasons used only in conditions.
const (
	// ReasonHolderPublished means Held=True.
	ReasonHolderPublished = "HolderPublished"
	// ReasonNoHolder means Held=False with no eligible candidate.
	ReasonNoHolder = "NoHolder"
	// ReasonEtcdReachable means EtcdAvailable=True.
	ReasonEtcdReachable = "EtcdReachable"
	// ReasonEtcdUnreachable means EtcdAvailable=False; the message carries the error.
	ReasonEtcdUnreachable = "EtcdUnreachable"
	// ReasonSpecValid means Valid=True.
	ReasonSpecValid = "SpecValid"
	// ReasonNoCandidates means the selector matches no pod in the namespace.
	ReasonNoCandidates = "NoCandidates"
	// ReasonInvalidSelector means the selector cannot be parsed as a label selector.
	ReasonInvalidSelector = "InvalidSelector"
	// ReasonPreferredHolderAbsent means strategy Preferred names a pod that does not exist or is
	// not selected.
	ReasonPreferredHolderAbsent = "PreferredHolderAbsent"
)
