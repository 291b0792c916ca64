package chaos

import (
	"math/rand/v2"
	"time"
)

// The global mode of the suite (issue 21; docs/global.md): two clusters, east and west, each
// with its own control plane and one manager, contend for one scope Global lock (the same
// spec.globalName) over the shared 3-member etcd; every worker of both clusters writes to one
// ledger outside both. Its faults act on whichever cluster holds the term when they start.
const (
	// GlobalManagerKill: SIGKILL the holder cluster's manager; it starts again after Hold.
	GlobalManagerKill = "global-manager-kill"
	// GlobalManagerCut: the holder cluster's manager is cut from every etcd member (its
	// proxies drop traffic) for Hold, longer than G + D: the other cluster takes over.
	GlobalManagerCut = "global-manager-cut"
	// GlobalPodDelete: delete the holder pod gracefully (the stand-in kubelet's recorded
	// sequence); a pod of the same name comes back after Hold.
	GlobalPodDelete = "global-pod-delete"
	// GlobalEtcdMemberKill: SIGKILL one member of the shared etcd (Member 0: the leader, else
	// member Member), restarted with its data after Hold.
	GlobalEtcdMemberKill = "global-etcd-member-kill"
	// GlobalWorkerPause: SIGSTOP the holder pod's worker past L + D, then SIGCONT.
	GlobalWorkerPause = "global-worker-pause"
)

// GlobalKinds lists the global mode's fault kinds in a fixed order.
var GlobalKinds = []string{GlobalManagerKill, GlobalManagerCut, GlobalPodDelete, GlobalEtcdMemberKill, GlobalWorkerPause}

// Failover reports whether kind takes the holder cluster's manager out, so that the term is
// to move to the other cluster, whose first write after the fault measures the failover.
func Failover(kind string) bool { return kind == GlobalManagerKill || kind == GlobalManagerCut }

// EndsTerm reports whether kind ends the holder's term (its manager gone or cut off, its pod
// deleted or paused), so that recovery means a write under a newer token; the etcd member
// kill may leave the term as it is.
func EndsTerm(kind string) bool { return kind != GlobalEtcdMemberKill }

// AcceptedAbove reports whether the ledger accepted an append under a token above token.
func AcceptedAbove(outs []Outcome, token int64) bool {
	for _, o := range outs {
		if o.Accepted && o.Op == "append" && o.Token > token {
			return true
		}
	}
	return false
}

// GlobalTiming is what a global schedule's durations derive from: the lock's L and D and the
// grant lease's TTL G (G = L in this slice, docs/global.md "Defaults").
type GlobalTiming struct {
	Lease     time.Duration // L: spec.leaseDurationSeconds
	LockDelay time.Duration // D: spec.lockDelaySeconds
	Grant     time.Duration // G: the grant lease's TTL
}

// FailoverBound is docs/global.md's bound for a takeover after the holder cluster's manager
// is cut from etcd or killed: G + D + 1 s.
func (t GlobalTiming) FailoverBound() time.Duration { return t.Grant + t.LockDelay + time.Second }

// NewGlobalSchedule derives a global run's schedule from seed: one or two faults, the first
// GlobalKinds[(seed+run) mod 5] so that five consecutive runs start with every kind, the
// second (one run in two) drawn from all. The same arguments give the same schedule.
func NewGlobalSchedule(seed uint64, run int, t GlobalTiming) Schedule {
	rng := rand.New(rand.NewPCG(seed, uint64(run)*0x9e3779b97f4a7c15+2))
	s := Schedule{Seed: seed, Run: run}
	n := uint64(len(GlobalKinds))
	s.Faults = append(s.Faults, newGlobalFault(rng, GlobalKinds[(seed+uint64(run))%n], t))
	if rng.IntN(2) == 1 {
		s.Faults = append(s.Faults, newGlobalFault(rng, GlobalKinds[rng.IntN(len(GlobalKinds))], t))
	}
	return s
}

// newGlobalFault draws one fault's parameters. Gap leaves a new holder time for its first
// rounds (r0, r0+1) before the next fault.
func newGlobalFault(rng *rand.Rand, kind string, t GlobalTiming) Fault {
	f := Fault{Kind: kind, Gap: between(rng, 2*time.Second, 5*time.Second)}
	switch kind {
	case GlobalManagerKill:
		// Back before the other cluster may take over, or after it did.
		f.Hold = between(rng, 2*time.Second, t.Grant+t.LockDelay+4*time.Second)
	case GlobalManagerCut:
		f.Hold = between(rng, t.Grant+t.LockDelay+3*time.Second, t.Grant+t.LockDelay+6*time.Second)
	case GlobalPodDelete:
		f.Hold = between(rng, 500*time.Millisecond, 2*time.Second)
	case GlobalEtcdMemberKill:
		f.Hold = between(rng, time.Second, 4*time.Second)
		f.Member = rng.IntN(3)
	case GlobalWorkerPause:
		f.Hold = between(rng, t.Lease+t.LockDelay+time.Second, t.Lease+t.LockDelay+3*time.Second)
	}
	return f
}
