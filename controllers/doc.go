// Package controllers reconciles DistributedLocks against etcd: it picks a holder among the
// eligible candidate pods, records each grant in etcd with one guarded transaction, ends terms
// only by the rules of the term lifecycle, and publishes holder and fencing token in status
// with resourceVersion-guarded updates.
//
// Guarantees: every ownership change is committed in etcd, guarded by the controller's own
// election lock, before it is published; a published holder leaves only through attested
// termination or through the Releasing phase followed by the lock delay; the published token
// never goes back (the API server refuses it). Not guaranteed: that a holder stops acting when
// its term ends. That is the pod's side (pkg/leadership) and, for safety, the resource's,
// which must check the fencing token.
package controllers
