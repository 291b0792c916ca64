package chaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Fault kinds. Each names one fault the harness can inject; docs/reliability.md describes
// them.
const (
	WorkerPauseShort = "worker-pause-short" // SIGSTOP the leader below its lease, then SIGCONT
	WorkerPauseLong  = "worker-pause-long"  // SIGSTOP the leader past lease + lockDelay, then SIGCONT
	WorkerKill       = "worker-kill"        // SIGKILL the leader
	APIHold          = "api-hold"           // the leader's API server proxy holds every request
	APIRefuse        = "api-refuse"         // the leader's API server proxy refuses and cuts watches
	APIReplay        = "api-watch-replay"   // replay stale watch frames of the lock to every worker
	EtcdBlackhole    = "etcd-blackhole"     // the active controller's etcd proxies drop traffic
	EtcdDelay        = "etcd-delay"         // the active controller's etcd proxies delay, with jitter
	PeerBlackhole    = "peer-blackhole"     // one etcd member's peer proxy drops traffic
	PeerDelay        = "peer-delay"         // one etcd member's peer proxy delays, with jitter
	EtcdLeaderKill   = "etcd-leader-kill"   // SIGKILL the etcd leader, restart it later
	ControllerKill   = "controller-kill"    // SIGKILL the active controller (restarted as standby)
	ControllerZombie = "controller-zombie"  // SIGSTOP the active controller past its election, SIGCONT
	DropStatus       = "failpoint-drop-status-after-grant"
	LoseRelease      = "failpoint-lose-release-reply"
	PodRecreate      = "pod-delete-recreate" // delete the holder's pod, worker running; same name again
	ReadinessFlap    = "readiness-flap"      // the holder's Ready flips faster than lockDelay
	LeaseLower       = "lease-lower"         // lower spec.leaseDurationSeconds while held
	EtcdRestore      = "etcd-restore"        // restore a snapshot without, then with --bump-revision

	// The kinds below write what the real component writes where the controller could take
	// a state that is not proof of termination as proof (issue 10; NOTES.md, "What a real
	// kubelet and PodGC write").
	CrashRestart        = "crash-restart"             // SIGKILL the holder's worker, the pod's one container (restartPolicy Always): restarted under the same UID; proof: the same pod, a new token, at once
	CrashRestartSidecar = "crash-restart-sidecar"     // SIGKILL the holder's worker, a native sidecar: restarted under the same UID; no proof: Releasing and the full delay
	SidecarDelete       = "sidecar-delete"            // delete the holder whose worker is a native sidecar: main stops first, sidecar last
	NodePodGC           = "node-delete-podgc"         // partition the holder's node, delete the Node: PodGC's Failed with containers running
	LateStatusWrite     = "deposed-late-status-write" // a deposed replica's status write held by its API proxy, released late
	LoseAcquireReply    = "etcd-lose-acquire-reply"   // the active controller's etcd replies dropped while it grants
	StalledWatch        = "etcd-stalled-watch"        // SIGSTOP an etcd follower (stalls the watches on it) and fail over the controller

	// The stall kinds put the fence under test (stall.go): the holder's next write waits
	// between its Valid() check and its send until the next holder has written.
	WorkerStall = "worker-stall-before-write" // the holder's pod turns NotReady while its write waits
	EngineStall = "engine-stall-before-write" // an engine run: the holder is force-released (pkg/lease.ForceRelease) while its write waits

	// Engine kinds run a workload of pkg/lease users (no Kubernetes) instead of pods.
	EngineForceRelease     = "engine-force-release-delayed-txn" // ForceRelease whose transaction applies late; the evicted holder pauses
	EngineLoseAcquireReply = "engine-lose-acquire-reply"        // the waiters' etcd replies dropped while the holder releases
	EngineStalledWatch     = "engine-stalled-watch"             // SIGSTOP an etcd follower (stalls the watches on it), then the holder releases
	EngineHandoffExpiry    = "engine-handoff-waiter-expiry"     // the holder releases as the next waiter's session ends (lease just revoked, or the waiter cut off)

	// Issue 25 item 8: routing while terms move, and the two other ways a pod leads.
	RoutingMove          = "routing-move"           // the lock routes a Service to its holder (spec.routing); the term moves: deletion, NotReady or a long pause (CheckRouting)
	ResourceLockAPIPause = "resourcelock-api-pause" // the workers are controller-runtime managers elected through leadership.ResourceLock; the leader's API server traffic is held past the lease
	AgentExecAPIPause    = "agent-exec-api-pause"   // the workers are lockwarden-agent exec with a ledger-writing child; the leader agent's API server traffic is held past the lease

	// Issue 22: a lock of several slots (spec.slots), a ledger per slot (slots.go).
	SlotsStall = "slots-stall-before-write" // a lock of SlotLockSlots slots over SlotLockPods pods: each slot's holder in turn stalls a write and turns NotReady; that slot's ledger must refuse the write
)

// A slot run's lock and pods (Schedule.Slots, Schedule.Pods): more pods than slots, so that
// a slot whose holder turns NotReady has another pod to go to.
const (
	SlotLockSlots = 3
	SlotLockPods  = 5
	// oneSlotPods is the candidate pods of every other run.
	oneSlotPods = 3
)

// Slots is spec.slots of the run's lock: SlotLockSlots when its first fault is SlotsStall,
// else 1 (NewSchedule draws it as no extra fault).
func (s Schedule) Slots() int {
	if len(s.Faults) > 0 && s.Faults[0].Kind == SlotsStall {
		return SlotLockSlots
	}
	return 1
}

// Pods is how many candidate pods the run's lock has.
func (s Schedule) Pods() int {
	if s.Slots() > 1 {
		return SlotLockPods
	}
	return oneSlotPods
}

// Worker modes: what plays a run's pods (Schedule.Worker, set by its first fault).
const (
	// WorkerElector: chaosworker on a leadership.Elector (every kind but the two below).
	WorkerElector = "elector"
	// WorkerResourceLock: chaosworker --mode resourcelock, a controller-runtime manager run
	// by leadership.RunManager on a crmanager.Options ResourceLock; a leader-election runnable
	// writes the ledger with the lock's Token() and Writer().
	WorkerResourceLock = "resourcelock"
	// WorkerAgent: lockwarden-agent exec running chaosworker --child, which writes the ledger
	// with LOCKWARDEN_TOKEN and LOCKWARDEN_WRITER.
	WorkerAgent = "agent"
)

// WorkerOf is the worker mode kind needs, "" for a kind that needs the Elector's (the stall
// hook, SIGSTOP of the process that checks Valid()) or runs on any.
func WorkerOf(kind string) string {
	switch kind {
	case ResourceLockAPIPause:
		return WorkerResourceLock
	case AgentExecAPIPause:
		return WorkerAgent
	}
	return ""
}

// Worker is the worker mode of the schedule's run: its first fault's, WorkerElector when
// that needs none (NewSchedule draws no extra fault that needs another).
func (s Schedule) Worker() string {
	if len(s.Faults) > 0 {
		if m := WorkerOf(s.Faults[0].Kind); m != "" {
			return m
		}
	}
	return WorkerElector
}

// Routing reports whether the run's lock routes a Service to its holder (spec.routing): when
// any of its faults is RoutingMove, so that CheckRouting has slices to check.
func (s Schedule) Routing() bool { return s.Counts()[RoutingMove] > 0 }

// anyWorker lists the kinds that act on the controller, etcd or the API server path, never on
// the worker process itself: the extra faults of a run whose worker is not the Elector.
var anyWorker = map[string]bool{
	APIHold: true, APIRefuse: true, EtcdBlackhole: true, EtcdDelay: true, PeerBlackhole: true, PeerDelay: true,
	EtcdLeaderKill: true, ControllerKill: true, ControllerZombie: true, LeaseLower: true,
}

// extraFits reports whether k may follow first as an extra fault: the same workload (engine
// or pods), the same pod shape, the same worker mode.
func extraFits(k, first string) bool {
	if first == SlotsStall {
		return anyWorker[k] // they act on slot 0's holder, or on no pod
	}
	if k == SlotsStall || k == EtcdRestore || k == StalledWatch || k == EngineStalledWatch || IsEngine(k) != IsEngine(first) {
		return false
	}
	if shape := ShapeOf(k); shape != "" && shape != ShapeOf(first) {
		return false
	}
	if m := WorkerOf(first); m != "" {
		return WorkerOf(k) == m || anyWorker[k]
	}
	return WorkerOf(k) == ""
}

// EngineKinds lists the kinds that run the pkg/lease workload; a schedule that starts with
// one draws its extra faults from these only.
var EngineKinds = []string{EngineForceRelease, EngineLoseAcquireReply, EngineStalledWatch, EngineHandoffExpiry, EngineStall}

// IsEngine reports whether kind runs the pkg/lease workload.
func IsEngine(kind string) bool {
	for _, k := range EngineKinds {
		if k == kind {
			return true
		}
	}
	return false
}

// Engine reports whether the schedule runs the pkg/lease workload.
func (s Schedule) Engine() bool { return len(s.Faults) > 0 && IsEngine(s.Faults[0].Kind) }

// Kinds lists every fault kind in a fixed order.
var Kinds = []string{
	WorkerPauseShort, WorkerPauseLong, WorkerKill,
	APIHold, APIRefuse, APIReplay,
	EtcdBlackhole, EtcdDelay, PeerBlackhole, PeerDelay, EtcdLeaderKill,
	ControllerKill, ControllerZombie, DropStatus, LoseRelease,
	PodRecreate, ReadinessFlap, LeaseLower, EtcdRestore,
	CrashRestart, SidecarDelete, NodePodGC, LateStatusWrite, LoseAcquireReply, StalledWatch,
	EngineForceRelease, EngineLoseAcquireReply, EngineStalledWatch, EngineHandoffExpiry,
	CrashRestartSidecar, WorkerStall, EngineStall,
	RoutingMove, ResourceLockAPIPause, AgentExecAPIPause,
	SlotsStall,
}

// Pod shapes: how a run's pods are built (the stand-in kubelet's podShape).
const (
	// ShapePlain: one container, restartPolicy Never; a worker that exits ends its pod.
	ShapePlain = "plain"
	// ShapeRestart: one container, restartPolicy Always (a StatefulSet's): a crash is
	// restarted under the same UID, and the restart proves the old process gone.
	ShapeRestart = "restart"
	// ShapeSidecar: the worker is a native sidecar beside a main container: the kubelet
	// restarts it under the same UID, and no restart proves anything.
	ShapeSidecar = "sidecar"
)

// ShapeOf is the pod shape kind needs, "" for a kind that runs on any.
func ShapeOf(kind string) string {
	switch kind {
	case CrashRestart:
		return ShapeRestart
	case CrashRestartSidecar, SidecarDelete:
		return ShapeSidecar
	}
	return ""
}

// Shape is the pod shape of the schedule's run: its first fault's, ShapePlain when that runs
// on any (NewSchedule draws no extra fault that needs another).
func (s Schedule) Shape() string {
	if len(s.Faults) > 0 {
		if shape := ShapeOf(s.Faults[0].Kind); shape != "" {
			return shape
		}
	}
	return ShapePlain
}

// Timing is what a schedule's durations derive from.
type Timing struct {
	Lease       time.Duration // spec.leaseDurationSeconds
	LockDelay   time.Duration // spec.lockDelaySeconds
	ElectionTTL time.Duration // --election-ttl
}

// Fault is one scheduled fault: inject Kind after Gap (from the previous fault's heal, or
// from the lock's first writes), keep it for Hold, then heal it. Jitter and Member are
// kind-specific parameters (a delay's spread; which etcd member).
type Fault struct {
	Kind   string        `json:"kind"`
	Gap    time.Duration `json:"gap"`
	Hold   time.Duration `json:"hold"`
	Jitter time.Duration `json:"jitter,omitempty"`
	Member int           `json:"member,omitempty"`
}

// Schedule is one run's faults.
type Schedule struct {
	Seed   uint64  `json:"seed"`
	Run    int     `json:"run"`
	Faults []Fault `json:"faults"`
}

// Hash is a short hash of the schedule's canonical JSON: same seed and run, same hash.
func (s Schedule) Hash() string {
	b, _ := json.Marshal(s) // plain structs: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// Counts returns how many faults of each kind the schedule holds.
func (s Schedule) Counts() map[string]int {
	m := map[string]int{}
	for _, f := range s.Faults {
		m[f.Kind]++
	}
	return m
}

// String lists the faults in order.
func (s Schedule) String() string {
	var parts []string
	for _, f := range s.Faults {
		parts = append(parts, fmt.Sprintf("%s(%v)", f.Kind, f.Hold.Round(100*time.Millisecond)))
	}
	return strings.Join(parts, " ")
}

// NewSchedule derives run's schedule from seed: its first fault is kinds[(seed+run) mod n],
// so that n consecutive runs cover every kind, followed by up to extra random faults of the
// kinds in kinds (never the restore or the stalled watch, which are slow; engine kinds after
// an engine kind only, and only after one; a kind that needs a pod shape only after a first
// fault of that shape, which sets the run's: Schedule.Shape; likewise a worker mode:
// Schedule.Worker, whose runs draw only their own kind and kinds that leave the worker
// process alone). The same arguments give the same schedule.
func NewSchedule(seed uint64, run int, kinds []string, extra int, t Timing) Schedule {
	rng := rand.New(rand.NewPCG(seed, uint64(run)*0x9e3779b97f4a7c15+1))
	s := Schedule{Seed: seed, Run: run}
	n := uint64(len(kinds))
	first := kinds[(seed+uint64(run))%n]
	s.Faults = append(s.Faults, newFault(rng, first, t))
	var cheap []string
	for _, k := range kinds {
		if extraFits(k, first) {
			cheap = append(cheap, k)
		}
	}
	if len(cheap) > 0 && extra > 0 {
		for range rng.IntN(extra + 1) {
			s.Faults = append(s.Faults, newFault(rng, cheap[rng.IntN(len(cheap))], t))
		}
	}
	return s
}

// between returns a duration uniform in [lo, hi), in whole milliseconds.
func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	ms := rng.Int64N(int64((hi - lo) / time.Millisecond))
	return lo + time.Duration(ms)*time.Millisecond
}

func newFault(rng *rand.Rand, kind string, t Timing) Fault {
	f := Fault{Kind: kind, Gap: between(rng, 500*time.Millisecond, 2*time.Second)}
	margin := min(max(2*time.Second, t.Lease/50), t.Lease/4)
	switch kind {
	case WorkerPauseShort:
		f.Hold = between(rng, 100*time.Millisecond, t.Lease-margin)
	case WorkerPauseLong:
		f.Hold = between(rng, t.Lease+t.LockDelay+time.Second, t.Lease+t.LockDelay+3*time.Second)
	case APIHold, APIRefuse:
		f.Hold = between(rng, t.Lease/2, t.Lease+t.LockDelay+2*time.Second)
	case ResourceLockAPIPause, AgentExecAPIPause:
		f.Hold = between(rng, t.Lease+time.Second, t.Lease+t.LockDelay+2*time.Second) // past the lease
	case RoutingMove:
		// Member 0: delete the holder's pod gracefully (attested: the next grant at once);
		// 1: its readiness fails for Hold (Releasing, the lock delay); 2: SIGSTOP its worker
		// for Hold (it turns NotReady, then the same).
		f.Member = rng.IntN(3)
		f.Hold = between(rng, t.Lease+t.LockDelay+time.Second, t.Lease+t.LockDelay+3*time.Second)
		if f.Member == 0 {
			f.Hold = between(rng, 500*time.Millisecond, 2*time.Second)
		}
	case EtcdBlackhole:
		f.Hold = between(rng, t.ElectionTTL/2, t.ElectionTTL+2*time.Second)
	case EtcdDelay, PeerDelay:
		f.Hold = between(rng, time.Second, 4*time.Second)
		f.Jitter = between(rng, 20*time.Millisecond, 300*time.Millisecond)
	case PeerBlackhole, EtcdLeaderKill:
		f.Hold = between(rng, time.Second, 4*time.Second)
		f.Member = rng.IntN(3)
	case ControllerKill:
		f.Hold = between(rng, 200*time.Millisecond, 2*time.Second)
	case ControllerZombie:
		f.Hold = between(rng, t.ElectionTTL+time.Second, t.ElectionTTL+3*time.Second)
	case ReadinessFlap:
		f.Hold = between(rng, t.LockDelay, 2*t.LockDelay+time.Second)
		f.Jitter = between(rng, 200*time.Millisecond, max(t.LockDelay/3, 300*time.Millisecond))
	case PodRecreate, LeaseLower, WorkerKill, APIReplay, DropStatus, LoseRelease:
		f.Hold = between(rng, 500*time.Millisecond, 2*time.Second)
	case CrashRestart, CrashRestartSidecar:
		f.Hold = between(rng, 2*time.Second, 4*time.Second)
		f.Jitter = between(rng, 100*time.Millisecond, 800*time.Millisecond) // until the restart
	case WorkerStall, EngineStall, SlotsStall:
		f.Hold = between(rng, 300*time.Millisecond, time.Second) // after the stalled write returned
	case SidecarDelete:
		f.Hold = between(rng, 500*time.Millisecond, t.Lease) // main stopped, sidecar running
	case NodePodGC:
		f.Hold = between(rng, t.Lease+t.LockDelay+time.Second, t.Lease+t.LockDelay+3*time.Second)
	case LateStatusWrite:
		f.Hold = between(rng, 500*time.Millisecond, time.Second)
		f.Member = rng.IntN(4) / 3 // 0 (3 in 4): the late write lands before the new replica's, 1: after
	case LoseAcquireReply:
		f.Hold = between(rng, 300*time.Millisecond, 1500*time.Millisecond)
	case EngineForceRelease:
		f.Jitter = between(rng, 2*time.Second, 2800*time.Millisecond) // the transaction's delay
		f.Hold = t.Lease + 2*time.Second                              // the evicted holder's pause
	case EngineLoseAcquireReply:
		f.Hold = between(rng, 300*time.Millisecond, 1500*time.Millisecond)
	case EngineHandoffExpiry:
		// Member 0: etcd revokes the next waiter's lease, and Jitter later the holder is told
		// to release, before the waiter's client can notice. Member 1: the next waiter is cut
		// off from etcd, and the holder releases Jitter later, around when the waiter's own
		// session ends (between 1.25 and 2.25 s after the cut with the engine's 3 s TTL); the
		// cut lasts Hold.
		f.Member = rng.IntN(2)
		if f.Member == 0 {
			f.Jitter = between(rng, 0, 30*time.Millisecond)
			f.Hold = between(rng, 500*time.Millisecond, time.Second)
		} else {
			f.Jitter = between(rng, time.Second, 2500*time.Millisecond)
			f.Hold = between(rng, 3*time.Second, 4*time.Second)
		}
	case EngineStalledWatch:
		f.Hold = between(rng, 500*time.Millisecond, time.Second) // after the in-fault liveness check
		f.Member = rng.IntN(2)                                   // which follower
	case StalledWatch:
		f.Hold = between(rng, 500*time.Millisecond, time.Second) // after the in-fault liveness check
		f.Member = rng.IntN(2)                                   // which follower
	case EtcdRestore:
		f.Hold = between(rng, 2*time.Second, 4*time.Second)
	}
	return f
}
