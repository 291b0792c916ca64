package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Across a lock of N slots, no more than N pods ever hold valid terms at once. Each slot's
// terms do not overlap (CheckOverlaps, per slot), so this follows when every term is
// attributed to the right slot; CheckHolders does not rely on that attribution: it counts
// the pods from their own validity intervals (Interval: from OnStartedLeading to the
// earliest of the observed end, the latest deadline Valid() promised and the process's exit),
// whatever slot they say they held. For one slot it is CheckOverlaps' property.

// CheckHolders sweeps the intervals of every slot and returns the most pods (UIDs) that held
// valid terms at one instant, and a violation for every stretch of time longer than
// tolerance during which more than n did. Intervals are half-open: a term that ends at the
// instant another begins does not overlap it.
func CheckHolders(ivs []Interval, n int, tolerance time.Duration) (int, []Violation) {
	type point struct {
		at    int64
		start bool
		iv    int
	}
	var pts []point
	for i, iv := range ivs {
		if iv.End > iv.Start {
			pts = append(pts, point{iv.Start, true, i}, point{iv.End, false, i})
		}
	}
	sort.SliceStable(pts, func(i, j int) bool {
		if pts[i].at != pts[j].at {
			return pts[i].at < pts[j].at
		}
		return !pts[i].start && pts[j].start // ends first
	})
	active := map[int]bool{} // intervals valid now
	pods := map[string]int{} // UID -> its intervals valid now
	most := 0
	var vs []Violation
	var over struct {
		from, to int64
		peak     int
		who      []int // the intervals valid at the peak
	}
	flush := func() {
		if over.peak > 0 && time.Duration(over.to-over.from) > tolerance {
			vs = append(vs, Violation{Checker: "holders", Detail: fmt.Sprintf(
				"%d pods held valid terms at once for %v (lock of %d slots, tolerance %v): %s",
				over.peak, short(time.Duration(over.to-over.from)), n, tolerance, describe(ivs, over.who))})
		}
		over.peak, over.who = 0, nil
	}
	for k := 0; k < len(pts); {
		at := pts[k].at
		for ; k < len(pts) && pts[k].at == at; k++ {
			p := pts[k]
			uid := ivs[p.iv].UID
			if p.start {
				active[p.iv] = true
				pods[uid]++
			} else {
				delete(active, p.iv)
				if pods[uid]--; pods[uid] == 0 {
					delete(pods, uid)
				}
			}
		}
		if k == len(pts) {
			break // nothing is valid after the last end
		}
		next := pts[k].at // [at, next) has len(pods) holders
		held := len(pods)
		most = max(most, held)
		switch {
		case held > n && over.peak == 0:
			over.from = at
			fallthrough
		case held > n:
			over.to = next
			if held > over.peak {
				over.peak, over.who = held, keys(active)
			}
		default:
			flush()
		}
	}
	flush()
	return most, vs
}

// CheckOneSlotPerPod checks that no pod held valid terms in two slots at once for longer than
// tolerance: the controller grants a pod at most one slot, and one slot again only after its
// term in another has ended.
func CheckOneSlotPerPod(ivs []Interval, tolerance time.Duration) []Violation {
	byUID := map[string][]int{}
	var uids []string
	for i, iv := range ivs {
		if len(byUID[iv.UID]) == 0 {
			uids = append(uids, iv.UID)
		}
		byUID[iv.UID] = append(byUID[iv.UID], i)
	}
	var vs []Violation
	for _, uid := range uids {
		idx := byUID[uid]
		for x := range idx {
			for y := x + 1; y < len(idx); y++ {
				a, b := ivs[idx[x]], ivs[idx[y]]
				if a.Slot == b.Slot {
					continue
				}
				if d := time.Duration(min(a.End, b.End) - max(a.Start, b.Start)); d > tolerance {
					vs = append(vs, Violation{Checker: "holders", Detail: fmt.Sprintf(
						"%s (%s) held valid terms in two slots at once for %v: slot %d token %d and slot %d token %d",
						a.Pod, uid, short(d), a.Slot, a.Token, b.Slot, b.Token)})
				}
			}
		}
	}
	return vs
}

// keys returns the interval indexes of m in order.
func keys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// describe names the intervals idx of ivs: pod, UID, slot and token.
func describe(ivs []Interval, idx []int) string {
	parts := make([]string, 0, len(idx))
	for _, i := range idx {
		iv := ivs[i]
		parts = append(parts, fmt.Sprintf("%s (%s) slot %d token %d", iv.Pod, iv.UID, iv.Slot, iv.Token))
	}
	return strings.Join(parts, ", ")
}

// short rounds d to the millisecond for messages, unless it is shorter than that.
func short(d time.Duration) time.Duration {
	if d < time.Millisecond {
		return d
	}
	return d.Round(time.Millisecond)
}
