package lease

// How many guards fit in a slot's grant. etcd (v3rpc checkTxnRequest)
// refuses a transaction, as ErrTooManyOps, whose compares, Then ops or Else
// ops, whichever are the most (they do not add up), exceed its
// --max-txn-ops, and checks each nested transaction the same way against
// what the outer one left: the limit less that largest count. A slot's grant
// (grantSlot) has the engine's compares and the g guards, at most three Then
// ops, and, with guards, one Else op: a nested transaction of the g guards
// again, which tells a guard's failure from the engine's. So, with cmps
// engine compares, it fits when cmps+g <= maxOps and, with guards, g <=
// maxOps-(cmps+g) (review mx3: the check before added the Then ops to the
// compares, and refused AcquireSlot without guards at --max-txn-ops 8 or 9).

// Compares of the engine in a slot's grant: six, and TryAcquireSlot's
// "nobody queues" or a waiter's two of its entry. AcquireSlot sends both
// shapes (a free slot at once, or its entry's grant), TryAcquireSlot only the
// first.
const (
	trySlotCmps  = 7
	waitSlotCmps = 8
)

// slotThenOps is the most Then ops of a slot's grant: the slot key, a
// waiter's entry's delete, the call's tombstone.
const slotThenOps = 3

// slotCmps returns the engine's compares in the grants that AcquireSlot
// (wait) or TryAcquireSlot sends: the most of either shape.
func slotCmps(wait bool) int {
	if wait {
		return waitSlotCmps
	}
	return trySlotCmps
}

// slotGuardsFit reports whether a slot's grant with cmps engine compares and
// g guards fits in maxOps operations per transaction, as etcd counts them.
func slotGuardsFit(g, cmps, maxOps int) bool {
	outer := max(cmps+g, slotThenOps) // the Else has one op at most
	return outer <= maxOps && (g == 0 || g <= maxOps-outer)
}

// slotGuardsMost returns the most guards that fit in a slot's grant with
// cmps engine compares under maxOps (slotGuardsFit), or -1 if none do: g <=
// (maxOps-cmps)/2, since cmps exceeds slotThenOps.
func slotGuardsMost(cmps, maxOps int) int {
	if cmps > maxOps {
		return -1
	}
	return (maxOps - cmps) / 2
}

// checkSlotGuards refuses, as ErrInvalid, g guards that do not fit in the
// grants of an AcquireSlot (wait) or a TryAcquireSlot under maxOps, saying
// how many do. The lock operations' bound (lockConfig) is looser: a slot's
// grant fits fewer guards than the engine's other transactions do.
func checkSlotGuards(g int, wait bool, maxOps int) error {
	cmps := slotCmps(wait)
	if slotGuardsFit(g, cmps, maxOps) {
		return nil
	}
	return invalidf("%d guards: at most %d guards fit in a slot's grant at the server's limit of %d operations (its %d compares and the guards, which its nested transaction repeats)", g, slotGuardsMost(cmps, maxOps), maxOps, cmps)
}
