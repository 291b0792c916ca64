// Package leadership tells a pod whether it holds its DistributedLock, in the shape of
// client-go's leader election (OnStartedLeading(ctx, token), OnStoppedLeading, Valid()), and
// hands it the lock's fencing token. It needs get and watch on DistributedLocks (and patch to
// confirm releases), no etcd access, and the pod's UID (downward API metadata.uid, $POD_UID).
//
// # What it implements
//
// An Elector leads one term at a time. A term is a fencing token granted to this pod:
//
//   - Only a consistent read starts or extends a term: a GET of the lock with resourceVersion
//     unset, on its own uncached REST client, whose send time S is taken before the call. A
//     read that shows status.holderUID == Identity, phase Held and token t starts a term of t
//     (or extends the open term of t) until S + termLeaseSeconds - margin. A lock of scope
//     Global names its holder in status.globalHolderUID and has one more bound (see Global
//     locks).
//   - Reads are sent every termLeaseSeconds/3 (spec.leaseDurationSeconds/3 before the lock has
//     a term), each allowed that long (at most 30 s), and retried sooner after a failure. Every
//     pod reads, not only the holder: readiness needs to know that reads succeed.
//   - A term starts promptly: a watch event that names this pod holder, with phase Held, while
//     it does not lead, sends a read at once; the term starts when that read confirms. So a
//     grant is led within one watch delivery plus one GET, not at the next periodic read.
//   - A term ends at its deadline without a newer confirming read, and at once when a read or a
//     watch event shows another holder, another phase, another token (a new term for the same
//     pod: the old term stops, then the new one starts), or no lock. Watch events never extend
//     a term.
//   - Observations are ordered: one with a lower resourceVersion, or on the same incarnation
//     of the lock a lower maxFencingToken (or a Held token below the highest token seen), than
//     one already accepted is dropped, so a replayed or reordered watch event changes nothing.
//     resourceVersions are compared as unsigned integers, which is their form on etcd-backed
//     storage (the API server calls them opaque); one that does not parse is ordered by token
//     only.
//   - Margin per term is min(max(2s, L/50), L/4) of L = status.termLeaseSeconds, or
//     Config.Margin; a term whose margin is not below L/2, or a grant without
//     termLeaseSeconds, is refused (not led, and ReadyzCheck fails while that grant stands).
//   - Deadlines are measured on CLOCK_BOOTTIME on Linux (so time suspended counts) and on Go's
//     monotonic clock elsewhere; no decision compares this clock with another machine's.
//     Valid(), ValidUntil() and Token() read the clock themselves.
//   - Callbacks run one at a time on one goroutine, in event order. OnStartedLeading's
//     context is cancelled when its term ends; OnStoppedLeading follows once OnStartedLeading
//     has returned. ReadyzCheck fails while they overrun Config.StopBudget, and when no
//     consistent read has succeeded for longer than L - margin; it never depends on holding
//     the lock.
//   - Run owns every goroutine it starts (reads, watch, callbacks) and returns after all have
//     ended.
//   - Holder-confirmed release: when Release is called, or (with Config.ReleaseOnStop) when a
//     term ends while the lock still names this pod with that token (the controller's
//     Releasing, Run's context ending) and its OnStartedLeading ran until the term ended, the
//     elector waits until OnStartedLeading has returned and OnStoppedLeading has run, then
//     patches the annotation lockwarden.io/holder-release = "<Identity>/<token>". The
//     controller takes it as proof that the work stopped and grants the next candidate at once,
//     without the lock delay. The API server admits it only from the pod's own bound
//     service-account token, naming the current term (config/policy). A released token is not
//     led again, by this process or by a later process of the same pod: an observed
//     holder-release naming this pod and the observed token counts as released whatever the
//     process remembers. A release the API server refused is logged (and returned by
//     Release), never retried; the pod may lead that term again, and the controller ends it
//     after the lock delay. A release whose outcome is unknown (a timeout or a lost
//     connection: the API server may have applied it) keeps the token released; an
//     observation of the term still Held without the annotation sends it again, once per
//     observation and never while a release is unanswered. A term whose deadline passed is
//     never released automatically.
//   - Does my callback qualify for ReleaseOnStop? It does when the term's work runs inside
//     OnStartedLeading and has stopped when it returns: every goroutine it started has
//     returned, every write it sent has been answered (or its connection closed), nothing it
//     handed off (a queue, another process, another container) goes on under the token. A
//     callback that starts work and returns at once does not qualify, nor one that returns
//     while requests it sent may still be in flight without a deadline. Without the release
//     you give up speed, not safety: the controller ends the term after the lock delay
//     (max(lockDelaySeconds, termLeaseSeconds) from its acknowledged Releasing write), or at
//     once when the kubelet reports every container of the pod terminated; the next holder
//     starts that much later. lockwarden-agent exec (after the child, its process group and
//     every descendant are gone), the fenced-worker and RunManager with crmanager.Options
//     release by default; a bare ResourceLock only with ResourceLockConfig.ReleaseOnStop, and
//     the agent's sidecar only as a declared native sidecar of a pod being deleted.
//   - Who may release: the policy recognises the holder by a service-account token bound to
//     the holder pod, so anyone who may mint such a token (create serviceaccounts/token for
//     the holder's service account, or the kubelet of the holder's node) can release the
//     holder's term as well as the pod itself. Releasing is exactly as strong as the right to
//     mint tokens for the holder's service account; grant that right to no one else.
//
// # Writers
//
// A token names a term, and one term can reach a resource from two processes of one pod: the
// process before a container restart (a write it sent before it died may still arrive) and
// the one after; and from two terms of one process, when a term whose deadline passed is
// confirmed again by a later read with the same token (a write the first OnStartedLeading
// call sent may arrive after the second call's writes). So every term has a writer ID of its
// own, "<Identity>/<incarnation>" with an incarnation drawn each time a term starts (package
// pkg/fence/writer; the first term of a process presents the process's incarnation): stricter
// than DESIGN.md's one incarnation per process. WriterOf(ctx) is the term's writer, from
// OnStartedLeading's context; Writer() is the same value while that call runs (it is the
// writer of the term whose OnStartedLeading was called last). Read it once at the callback's
// start and send it with the token to every fenced resource (fence.Monotonic, the SQL form of
// package fence), which admits an equal token only from the writer that presented it first.
// A term's work starts only after its fence raise is admitted. When the resource refuses the
// raise because another writer presented the same token first, the term is over for this
// process: call Abandon(token). The term ends at once without a release (this process cannot
// promise that the other writer stopped), the token is never led again by this process, and
// ReadyzCheck fails while the lock still names the pod with it, so that the controller ends
// the term and grants a new token. A token led again after its deadline passed is therefore
// refused at every resource the earlier call fenced, and ends the same way.
//
// # Slots
//
// A lock with spec.slots N above 1 is a fenced semaphore: up to N pods hold it at once, each
// in a slot of its own (status.slots; slot 0 is the status's own fields), and each slot is a
// term of its own with tokens of its own (its etcd key's revisions). An Elector leads the slot
// whose term names its pod, and every rule above applies to that slot's view alone: its
// phase, token, termLeaseSeconds, history (Ending), the holder-release naming its token, and
// the ordering of observations by its own maxFencingToken; a Held token below its slot's
// maxFencingToken is not led. Another slot's terms (a larger token in slot 0, a new holder of
// slot 2) neither start nor end this pod's term. A pod that moves to another slot leads a new
// term (OnStoppedLeading, then OnStartedLeading with the new slot's token). The callbacks
// keep their one-slot signatures: Slot() and SlotOf(ctx) tell which slot a term is of (0 for
// a one-slot lock), so that the work writes the slot's resources with the slot's token;
// resources shared by the slots need a fence per slot, because tokens of different slots are
// not ordered with each other. GetLeader and OnNewHolder report the holder of this pod's slot
// (slot 0's when it holds none). A ResourceLock leads one-slot locks only (ErrSlotsUnsupported).
//
// # Global locks
//
// A lock of spec.scope Global is one of several, one per cluster, contending for one grant in
// an etcd all their managers share (docs/global.md). Its status never sets holderUID (so that
// an older version of this package never leads a global term, finding F5): the holder pod of a
// term held in this cluster is status.globalHolderUID, and a term held by another cluster shows
// phase Held with no holder pod and status.globalCluster naming that cluster. Every rule above
// applies with globalHolderUID in holderUID's place, and one more bound (rule R5):
//
//   - Only consistent reads count for it, never a watch event or a cached read. The elector
//     keeps the newest consistent reads of the lock object (by UID; a lock created again
//     starts afresh), a bounded number, merging reads that show the same round.
//   - A term of token t is led only while the newest consistent read shows phase Held,
//     globalHolderUID == Identity and fencingToken == t, some consistent read shows a round r
//     with globalToken == t (rounds vouching for another token do not count), and some
//     consistent read of the same object sent at S showed a round at or below r-2. Then it is
//     valid until the earlier of the in-cluster bound (the newest read's send time +
//     termLeaseSeconds - margin) and S + D - m, S the newest such read, D the lowest
//     globalLockDelaySeconds any consistent read showed with a round vouching for t, and m =
//     max(2s, D/50, Config.Margin). A new holder therefore leads once rounds r0 (its grant)
//     and r0+1 vouch for its token, if it read the lock before the grant; and it stops by
//     S + D - m when rounds stop landing, however many reads still show Held. The deadline
//     follows every read: it can move earlier (a lower D), and ends the term when it has
//     passed.
//   - A consistent read showing a lower globalRound than an earlier read of the same object (a
//     store restored from a backup) ends the term at once, and every term of that object is
//     refused by this process from then on: ReadyzCheck fails wrapping ErrGlobalRefused, as it
//     does for a round whose lock delay is not above the margin.
//   - A watch event that shows this pod's grant and a round no consistent read has shown yet
//     sends a consistent read at once (while leading too), so a new holder leads within one
//     read of round r0+1 landing rather than at the next periodic read.
//   - GetLeader and GetLeaderUID report the holder pod and globalHolderUID; for a term held by
//     another cluster they are "" and OnNewHolder is called with holder "" and that term's
//     token (status.fencingToken).
//   - A ResourceLock applies the same bound: Update succeeds only while the earlier of the two
//     bounds leaves RenewDeadline + RetryPeriod, and its Valid, Token and ValidUntil follow it;
//     Get shows client-go a term held by another cluster as held by
//     "lockwarden:cluster/<globalCluster>".
//   - Releases are sent as for any lock; the controller's handling of a Global lock's
//     holder-release is its own (a refused release lets the pod lead that term again, within
//     the bound).
//
// # Client-go parity
//
// A program written for client-go's leaderelection moves over name for name:
//
//   - RunOrDie(ctx, cfg) is leaderelection.RunOrDie: New with Config.SingleTerm, panicking
//     on an invalid Config, then Run. It hides the Elector; call New and Run when the work
//     needs Valid() before its writes, or the checks and metrics below.
//   - Config.SingleTerm is client-go's callback contract: Run returns after its first term,
//     OnStartedLeading is called at most once and OnStoppedLeading exactly once, when Run ends,
//     even if no term started. Without it an Elector leads term after term until ctx ends. A
//     term skipped because an OnNewHolder call was still running does not count as the first.
//   - OnStartedLeading gets the fencing token besides ctx, and Run waits for it to return
//     (client-go starts it on a goroutine and returns without waiting). OnNewHolder gets the
//     holder pod's name and token; client-go's OnNewLeader gets the identity.
//   - GetLeader() is the holder pod's name (client-go's is the identity; GetLeaderUID() is
//     ours), from the newest observation with phase Held; IsLeader() is Valid().
//   - LivezCheck takes HealthzAdaptor's part, a liveness check that gets a stuck container
//     restarted, but judges the work rather than the lease: client-go's fails while the
//     process believes it leads and has not renewed for LeaseDuration + timeout; ours fails
//     while an ended term's callbacks overrun Config.StopBudget + Config.LivenessTimeout (a
//     term here cannot outlive its deadline, Valid() reads the clock). ReadyzCheck has no
//     client-go counterpart.
//   - Collector reports client-go's leader_election_master_status{name} and
//     lockwarden_leadership_* series; leader_election_slowpath_total has no counterpart.
//   - Timings: there is no LeaseDuration, RenewDeadline or RetryPeriod; the lock's
//     spec.leaseDurationSeconds and the controller decide terms, and reads follow
//     termLeaseSeconds/3. ReleaseOnStop and Release are ReleaseOnCancel, confirmed by the
//     holder after its work stopped.
//
// # controller-runtime managers: ResourceLock
//
// A ResourceLock is a client-go resourcelock.Interface backed by the lock, for a manager's
// LeaderElectionResourceLockInterface (crmanager.Options sets it up with one set of timings
// for manager and lock). client-go's elector then decides when the manager leads, and the
// ResourceLock only lets it: it writes nothing, Get and Update are consistent reads judged as
// above, and a renewal succeeds only while more of the term's validity is left than client-go
// may go on leading after it (RenewDeadline + RetryPeriod when declared with ExactTimings,
// 11/6 of LeaseDuration otherwise). So a manager that lost the lock stops its controllers
// within the term's validity, but only when client-go gives up, up to RenewDeadline +
// RetryPeriod after the controller ended the term: the ResourceLock's Valid() and Token()
// follow the lock at once, and reconcilers check Valid() before each write. While client-go
// does not lead, Get waits on a watch of the lock (at most RetryPeriod) until a grant to this
// pod shows up, so a standby learns of its grant from the watch rather than at its next poll
// (a grant that lands during client-go's pause between polls, RetryPeriod to 2.2 x
// RetryPeriod, is still seen only at the next Get). RunManager re-campaigns after a lost lock
// and confirms a clean stop with ResourceLockConfig.ReleaseOnStop, which crmanager.Options
// sets for a manager whose GracefulShutdownTimeout is not 0 (a bare NewResourceLock cannot
// see the manager's options: off unless the caller opts in). Suspends:
// client-go's timers run on the monotonic clock, so after a suspend the controllers may run
// past a validity measured on CLOCK_BOOTTIME; Valid() is right, which is why reconcilers
// check it.
//
// # Guarantees
//
// While Valid() is true, a consistent read sent less than termLeaseSeconds - margin ago (on
// this pod's clock) showed this pod as holder with Token(), and no newer observation has
// shown otherwise. Because the controller waits lockDelaySeconds (at least termLeaseSeconds)
// after its acknowledged Releasing write before granting anyone else, and every read sent after
// that write sees Releasing, a holder cut off from the API server stops before the next holder
// starts, as long as the two clocks do not drift apart by more than the margin over one lease.
//
// # What it does not guarantee
//
//   - Mutual exclusion in time. A process can pause (GC, CPU starvation, SIGSTOP, a VM
//     freeze) between Valid() and its write, and clocks drift; leadership from any lease can
//     overlap. Unlike client-go's leader election this package hands out a fencing token,
//     and the token makes the overlap harmless only if every resource the holder writes
//     rejects tokens lower than the highest it has accepted (see pkg/fence). A new term's
//     first act should be to raise the fence at the resources it will read from, before
//     reading state that feeds its writes.
//   - Prompt callbacks. A term's context is cancelled when the decision loop notices the end;
//     Valid() turns false exactly at the deadline even when nothing has run yet. Check Valid()
//     right before each write.
//   - Seeing every grant. A term that starts and ends while earlier callbacks still run gets
//     no callbacks; OnNewHolder reports changes, may come from an unconfirmed watch event, and
//     is not called after Run's context ends.
//   - Any meaning for resourceVersions on storage other than etcd (see above).
package leadership
