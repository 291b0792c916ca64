package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Phase is where a lock is in its term lifecycle.
// +kubebuilder:validation:Enum=Pending;Held;Releasing;Suspended
type Phase string

const (
	// PhasePending means no holder; waiting for an eligible candidate.
	PhasePending Phase = "Pending"
	// PhaseHeld means the holder named in status may act, with status.fencingToken.
	PhaseHeld Phase = "Held"
	// PhaseReleasing means the term is ending. The holder must stop; the controller waits the
	// lock delay from the acknowledgement of this status before granting anyone else.
	PhaseReleasing Phase = "Releasing"
	// PhaseSuspended means spec.suspend is true and no term is open.
	PhaseSuspended Phase = "Suspended"
)

// HistoryLimit is how many terms status.history keeps, newest first.
const HistoryLimit = 10

// DistributedLockStatus is the lock as the controller last published it. The fencing token
// is the etcd CreateRevision of the lock's key; a pod leads only while a consistent read of
// this status names its UID with phase Held.
//
// +kubebuilder:validation:XValidation:rule="!has(self.fencingToken) || (has(self.maxFencingToken) && self.fencingToken <= self.maxFencingToken)",message="fencingToken may not exceed maxFencingToken",fieldPath=".fencingToken",reason=FieldValueInvalid
type DistributedLockStatus struct {
	// Phase is Pending, Held, Releasing or Suspended.
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Holder is the name of the holding pod, for display. Identity is holderUID.
	// +optional
	Holder string `json:"holder,omitempty"`

	// HolderUID is the UID of the holding pod.
	// +optional
	HolderUID types.UID `json:"holderUID,omitempty"`

	// FencingToken is the current term's token: pass it to every resource you write.
	// +kubebuilder:validation:Minimum=0
	// +optional
	FencingToken int64 `json:"fencingToken,omitempty"`

	// MaxFencingToken is the highest token ever published for this lock. It never decreases
	// and is never removed (enforced by the API server).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxFencingToken int64 `json:"maxFencingToken,omitempty"`

	// ControllerEpoch is the election token of the controller replica that last wrote this
	// status. It never decreases and is never removed (enforced by the API server), so a
	// deposed controller cannot roll the status back.
	// +kubebuilder:validation:Minimum=0
	// +optional
	ControllerEpoch int64 `json:"controllerEpoch,omitempty"`

	// TermLeaseSeconds is the lease duration the current holder was granted under.
	// +optional
	TermLeaseSeconds int32 `json:"termLeaseSeconds,omitempty"`

	// LeaseID is the etcd lease (hex) the grant is attached to.
	// +optional
	LeaseID string `json:"leaseID,omitempty"`

	// AcquireTime is when the current term was granted (for display only; no decision uses it).
	// +optional
	AcquireTime *metav1.Time `json:"acquireTime,omitempty"`

	// Transitions counts the terms published over the lock's life: every grant after a term
	// ended (to another pod, or to the same pod after its key vanished). A Releasing term
	// that returns to Held is the same term and is not counted.
	// +optional
	Transitions int64 `json:"transitions,omitempty"`

	// EligibleCandidates is the number of eligible candidate pods, debounced (0 is written,
	// so that kubectl shows 0 rather than a blank).
	// +optional
	EligibleCandidates int32 `json:"eligibleCandidates"`

	// ObservedGeneration is the spec generation this status reflects.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Held, EtcdAvailable and Valid.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// History holds the last terms, newest first.
	// +kubebuilder:validation:MaxItems=10
	// +optional
	History []Term `json:"history,omitempty"`

	// Slots are the slots other than slot 0 of a lock with spec.slots above 1 (slot 0 is
	// the fields above), by index; a slot above spec.slots - 1 stays listed until its term
	// has ended. Empty for a one-slot lock.
	// +listType=map
	// +listMapKey=index
	// +kubebuilder:validation:MaxItems=15
	// +optional
	Slots []SlotStatus `json:"slots,omitempty"`

	// RemovedSlotsMaxFencingToken is the highest token of the slots that left status.slots
	// (spec.slots lowered): a slot listed again judges its grants from it, so a slot's
	// tokens only grow across a shrink and a grow. It never decreases and is never removed
	// (enforced by the API server).
	// +kubebuilder:validation:Minimum=0
	// +optional
	RemovedSlotsMaxFencingToken int64 `json:"removedSlotsMaxFencingToken,omitempty"`

	// SlotsHeld is "held/N" for a lock with more than one slot (the slots in phase Held,
	// and spec.slots), for display.
	// +optional
	SlotsHeld string `json:"slotsHeld,omitempty"`
	// GlobalCluster is, for a Global lock, the cluster (its manager's --cluster-name) whose
	// lock holds the global term; empty when no term is known. When it is another cluster,
	// holder is empty and fencingToken is that cluster's token.
	// +optional
	GlobalCluster string `json:"globalCluster,omitempty"`

	// GlobalHolderUID is, for a Global lock held in this cluster, the UID of the holding pod.
	// A Global lock never sets holderUID, so that a pod-side library that knows only
	// cluster-scoped locks never leads a global term.
	// +optional
	GlobalHolderUID types.UID `json:"globalHolderUID,omitempty"`

	// GlobalRound counts the manager's confirmations of a Global lock's grant in the shared
	// etcd: it steps by exactly 1 per write that carries a new confirmation, and a holder pod
	// stops by a bound that only these steps renew (docs/global.md, rule R5). It never
	// decreases and is never removed (enforced by the API server).
	// +kubebuilder:validation:Minimum=1
	// +optional
	GlobalRound int64 `json:"globalRound,omitempty"`

	// GlobalToken is the token that globalRound vouches for; it changes only with a step of
	// globalRound (enforced by the API server).
	// +kubebuilder:validation:Minimum=1
	// +optional
	GlobalToken int64 `json:"globalToken,omitempty"`

	// GlobalLockDelaySeconds is the lock delay recorded in the shared etcd with globalToken's
	// grant: another cluster grants only this long after it saw the grant gone. It changes
	// only with globalToken (enforced by the API server).
	// +kubebuilder:validation:Minimum=1
	// +optional
	GlobalLockDelaySeconds int32 `json:"globalLockDelaySeconds,omitempty"`
}

// SlotStatus is one slot of a lock with spec.slots above 1: a term of its own, with the
// same fields and rules as a one-slot lock's status. Its maxFencingToken never decreases
// while the slot is listed (enforced by the API server); its tokens are etcd revisions of
// its own key, so they strictly increase across the slot's grants.
//
// +kubebuilder:validation:XValidation:rule="(has(self.maxFencingToken) ? self.maxFencingToken : 0) >= (has(oldSelf.maxFencingToken) ? oldSelf.maxFencingToken : 0)",message="a slot's maxFencingToken may not decrease or be removed",fieldPath=".maxFencingToken",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.fencingToken) || (has(self.maxFencingToken) && self.fencingToken <= self.maxFencingToken)",message="a slot's fencingToken may not exceed its maxFencingToken",fieldPath=".fencingToken",reason=FieldValueInvalid
type SlotStatus struct {
	// Index is the slot's number, from 1 (slot 0 is the status's own fields).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=15
	Index int32 `json:"index"`

	// Phase is Pending, Held, Releasing or Suspended (a slot being removed, or spec.suspend).
	// +optional
	Phase Phase `json:"phase,omitempty"`

	// Holder is the name of the slot's holding pod, for display. Identity is holderUID.
	// +optional
	Holder string `json:"holder,omitempty"`

	// HolderUID is the UID of the slot's holding pod.
	// +optional
	HolderUID types.UID `json:"holderUID,omitempty"`

	// FencingToken is the slot's current term's token: pass it to every resource of this
	// slot you write.
	// +kubebuilder:validation:Minimum=0
	// +optional
	FencingToken int64 `json:"fencingToken,omitempty"`

	// MaxFencingToken is the highest token published for this slot.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxFencingToken int64 `json:"maxFencingToken,omitempty"`

	// TermLeaseSeconds is the lease duration the slot's holder was granted under.
	// +optional
	TermLeaseSeconds int32 `json:"termLeaseSeconds,omitempty"`

	// LeaseID is the etcd lease (hex) the slot's grant is attached to.
	// +optional
	LeaseID string `json:"leaseID,omitempty"`

	// AcquireTime is when the slot's term was granted (display only).
	// +optional
	AcquireTime *metav1.Time `json:"acquireTime,omitempty"`

	// Transitions counts the terms published in this slot.
	// +optional
	Transitions int64 `json:"transitions,omitempty"`

	// Conditions: Held, EtcdAvailable and Valid, for this slot.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// History holds the slot's last terms, newest first.
	// +kubebuilder:validation:MaxItems=10
	// +optional
	History []Term `json:"history,omitempty"`
}

// Term records one grant of the lock.
type Term struct {
	// Holder is the pod name.
	Holder string `json:"holder"`
	// HolderUID is the pod UID.
	HolderUID types.UID `json:"holderUID"`
	// Token is the term's fencing token.
	Token int64 `json:"token"`
	// Acquired is when the term was granted.
	Acquired metav1.Time `json:"acquired"`
	// Ended is when the term ended; unset while it is open.
	// +optional
	Ended *metav1.Time `json:"ended,omitempty"`
	// Reason is why the term began (Granted, Regranted) or ended (see the Reason constants).
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is the operator's reason (annotation lockwarden.io/release-reason) for a term
	// ended by a release request (reason OperatorRelease), at most 256 bytes.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Message string `json:"message,omitempty"`
}
