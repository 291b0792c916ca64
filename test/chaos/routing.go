package chaos

import (
	"fmt"
	"sort"
	"strings"
)

// SliceObs is one observed version of the EndpointSlice the controller publishes for a lock
// with spec.routing (resourceVersion order, from the harness's watch on the slice).
type SliceObs struct {
	RV uint64 `json:"rv"`
	// Ready lists the pod UIDs (targetRef) of the slice's endpoints whose ready condition is
	// true or unset (unset means ready in the EndpointSlice API); empty for a deleted slice.
	Ready []string `json:"ready,omitempty"`
	// Mono is when the harness saw it (CLOCK_MONOTONIC ns).
	Mono int64 `json:"mono"`
}

// CheckRouting checks the slice versions against the lock's status versions. Status and
// slice live in the same kube-apiserver storage, so their resourceVersions order every write
// of either; at each point of that order the newest slice version must satisfy what
// docs/routing.md promises:
//
//	"while the lock is `Held`, it lists exactly the holder pod [...]; before the controller
//	publishes any status that does not name that pod `Held` (`Releasing`, a new holder,
//	`Pending`, `Suspended`), it empties the slice; the new holder is listed only after its
//	`Held` status was written. So no EndpointSlice ever lists two pods, and none lists a pod
//	while the published phase is `Releasing`"
//
// So: the slice never lists two pods as ready, and a pod it lists is the holder of the
// newest status written before that point, in phase Held. (docs/routing.md's limits: a slice
// write the API server refused can leave a pod listed; the harness's managers reach the API
// server through gates that hold only status writes, so every slice write is accepted.)
func CheckRouting(obs []StatusObs, slices []SliceObs) []Violation {
	type point struct {
		rv     uint64
		status *StatusObs
		slice  *SliceObs
	}
	var pts []point
	for i := range obs {
		pts = append(pts, point{rv: obs[i].RV, status: &obs[i]})
	}
	for i := range slices {
		pts = append(pts, point{rv: slices[i].RV, slice: &slices[i]})
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].rv < pts[j].rv })
	var vs []Violation
	var st StatusObs // nothing published yet: no phase, no holder
	var listed []string
	var listedAt uint64
	judge := func(at uint64, what string) {
		switch {
		case len(listed) > 1:
			vs = append(vs, Violation{Checker: "routing", Detail: fmt.Sprintf("%s rv %d: the slice (rv %d) lists %d pods as ready: %s",
				what, at, listedAt, len(listed), strings.Join(listed, ", "))})
		case len(listed) == 1 && (st.Phase != "Held" || st.HolderUID != listed[0]):
			vs = append(vs, Violation{Checker: "routing", Detail: fmt.Sprintf("%s rv %d: the slice (rv %d) lists pod %s as ready while the lock's status (rv %d) is %s, holder %s (%s), token %d",
				what, at, listedAt, listed[0], st.RV, phaseOr(st.Phase), st.Holder, st.HolderUID, st.Token)})
		}
	}
	for _, p := range pts {
		if p.status != nil {
			st = *p.status
			judge(p.rv, "status")
			continue
		}
		listed, listedAt = p.slice.Ready, p.rv
		judge(p.rv, "slice")
	}
	return vs
}

func phaseOr(p string) string {
	if p == "" {
		return "unpublished"
	}
	return p
}
