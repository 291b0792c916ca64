// Package leadership tells a pod whether it holds its DistributedLock, in the shape of
// client-go's leader election: OnStartedLeading(ctx, token), OnStoppedLeading, Valid().
//
// It will lead only while its newest consistent read of the lock's status (a GET with no
// resourceVersion, sent at S) names this pod's UID with phase Held, and only until
// S + termLeaseSeconds - margin; watch events can end leadership, never extend it. It needs
// read access to DistributedLocks and no etcd access.
//
// Unlike client-go's leader election it hands the holder a fencing token. Leadership from
// any lease can overlap (a paused process does not know it was paused); the token makes the
// overlap harmless only if every resource the holder writes rejects tokens lower than the
// highest it has accepted (see pkg/fence).
package leadership
