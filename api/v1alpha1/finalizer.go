package v1alpha1

// Finalizer holds a DistributedLock until its term has ended and its etcd key is gone. The
// controller adds it (or the MutatingAdmissionPolicy of config/policy sets it at creation)
// and removes it once the lock's term has ended; kubectl dlock unfinalize removes it by hand,
// for when etcd is gone for good.
const Finalizer = "lockwarden.io/release"
