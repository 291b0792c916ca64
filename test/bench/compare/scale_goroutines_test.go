package main

import (
	"maps"
	"slices"
	"testing"
)

// dumpSample is an excerpt of a real manager's /debug/pprof/goroutine?debug=1 (paths
// shortened), with one block whose frames are all wait's and one without frames.
const dumpSample = `goroutine profile: total 13
6 @ 0x48da6e 0x41c66e 0x41c1b2 0x1b73045 0x495b41
#	0x1b73044	sigs.k8s.io/controller-runtime/pkg/manager.(*runnableGroup).reconcile+0x44	/m/runnable_group.go:236

4 @ 0x48da6e 0x469de5 0x1b76b37 0x1b7c99b 0x1b7e485 0x495b41
#	0x1b76b36	sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).GetWithPriority+0x116	/m/priorityqueue.go:461
#	0x1b7e484	sigs.k8s.io/controller-runtime/pkg/internal/controller.(*Controller[...]).Start.func1.1+0x84		/m/controller.go:315

1 @ 0x48da6e 0x41c66e 0x41c1b2 0x186361e 0xf9352c 0x495b41
#	0x186361d	k8s.io/client-go/tools/cache.(*processorListener).run+0x7d	/m/shared_informer.go:1487
#	0xf9352b	k8s.io/apimachinery/pkg/util/wait.(*Group).Start.func1+0x4b	/m/wait.go:72

1 @ 0x48da6e 0x41c66e
#	0xf9352b	k8s.io/apimachinery/pkg/util/wait.(*Group).Start.func1+0x4b	/m/wait.go:72

1 @ 0x48da6e
`

func TestGoroutinesByStart(t *testing.T) {
	got := goroutinesByStart(dumpSample)
	want := map[string]int{
		"manager.(*runnableGroup).reconcile":          6,
		"controller.(*Controller[...]).Start.func1.1": 4,
		"cache.(*processorListener).run":              1,
		"wait.(*Group).Start.func1":                   1,
		"?":                                           1,
	}
	if !maps.Equal(got, want) {
		t.Errorf("goroutinesByStart(sample) = %v, want %v", got, want)
	}
	if total := goroutinesByStart(""); len(total) != 0 {
		t.Errorf("goroutinesByStart(\"\") = %v, want empty", total)
	}
}

func TestGoroutinesAdded(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after map[string]int
		want          []string
	}{
		{"same", map[string]int{"a": 2}, map[string]int{"a": 2}, []string{}},
		{"more, new, gone", map[string]int{"a": 2, "gone": 1}, map[string]int{"a": 5, "new": 2},
			[]string{"a +3", "new +2", "gone -1"}},
		{"ties by name", nil, map[string]int{"b": 1, "a": 1}, []string{"a +1", "b +1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := goroutinesAdded(tc.before, tc.after); !slices.Equal(got, tc.want) {
				t.Errorf("goroutinesAdded(%v, %v) = %q, want %q", tc.before, tc.after, got, tc.want)
			}
		})
	}
}
