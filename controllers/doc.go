// Package controllers reconciles DistributedLocks against etcd: it picks a holder among the
// eligible candidate pods, records each grant in etcd with one guarded transaction, ends terms
// only by the rules of the term lifecycle, and publishes holder and fencing token in status
// with resourceVersion-guarded updates.
//
// Active (NewActive) is the entry point: a manager.Runnable that joins the controller
// election in etcd and runs the Reconciler only while this replica holds it; standbys wait
// in the election's queue with warm caches.
//
// Each reconcile is one turn: gather (gather.go: the lock key read linearizably, the
// candidates, the evidence about the published holder, this replica's clocks), decide
// (decide.go, ending.go: a pure function implementing DESIGN.md's term-lifecycle table),
// apply (apply.go: the guarded etcd writes), then one status write (turn.go). What counts as
// proof that a holder stopped is in attest.go, with what a real kubelet writes.
//
// Guarantees: every ownership change is committed in etcd, guarded by the controller's own
// election lock, before it is published; a new epoch records its controllerEpoch in a lock's
// status before its first etcd write for that lock, so a deposed replica's late status write
// fails; a published holder leaves only through attested termination or through the
// Releasing phase followed by the lock delay, counted from the acknowledgement of the status
// write that published it; the published token never goes back (the API server refuses it).
// A held lock costs no goroutine or etcd watch of its own. Not guaranteed: that a holder
// stops acting when its term ends. That is the pod's side (pkg/leadership) and, for safety,
// the resource's, which must check the fencing token.
package controllers
