package v1alpha1

// Annotations on a DistributedLock that end a term on request. The controller reads them;
// it never writes them.
const (
	// AnnotationHolderRelease is the holder pod's own confirmation that its work stopped
	// (holder-confirmed release), with the value "<holderUID>/<token>" (decimal token). A
	// ValidatingAdmissionPolicy admits it only from the holder pod's bound service-account
	// token, naming status.holderUID and status.fencingToken, with nothing else changed. The
	// controller ends that term at once, without the lock delay, when the value matches etcd's
	// grant, and ignores it otherwise.
	AnnotationHolderRelease = "lockwarden.io/holder-release"

	// AnnotationReleaseRequest is an operator's request to end the term of the token in its
	// value ("<token>", decimal): the controller moves the term to Releasing with the full
	// lock delay, records AnnotationReleaseReason in status.history and emits an Event. A
	// request naming a token that is not the current term's is ignored (an Event says so).
	// Any user allowed to patch distributedlocks may set it.
	AnnotationReleaseRequest = "lockwarden.io/release-request"

	// AnnotationReleaseReason is the free-text reason that goes with AnnotationReleaseRequest.
	AnnotationReleaseReason = "lockwarden.io/release-reason"
)
