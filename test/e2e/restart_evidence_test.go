//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestRestartEvidence records, on the real node (kubelet, containerd and runc as installed),
// what is left of a container when the API first shows its restart: the fact behind
// restartProof (controllers/restart.go), which lets a restarted holder have a new token at
// once. Each case is a fresh pod of crashee (test/e2e/crashee) whose main process forks a
// daemon (setsid and a double fork) and a stopped child, plus a process the test starts in
// the container with `kubectl exec`; the test kills the main process in one of four ways
// and, at the moment its watch receives the pod with the new containerID, reads the old
// container's cgroup in every v1 hierarchy and the state of each of those processes. A
// sampler reads the same every millisecond from the kill on, for when each one died.
//
// On the shape the proof accepts (one container, its own PID namespace) the test asserts,
// for every kind of kill, that the cgroup is empty and no process of the old container is
// alive when the API first shows the new containerID. On the shapes it refuses it records
// the same facts. The recording goes to bin/e2e/restart-evidence.txt and the table to
// bin/e2e/restart-evidence.md (docs/e2e.md quotes it).
func TestRestartEvidence(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "bin", "images", "crashee.tar")); err != nil {
		t.Fatalf("bin/images/crashee.tar not found: run `make image`")
	}
	n := startNode(t, "lockwarden-e2e-evidence")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: evidenceNS}}
	if _, err := n.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", evidenceNS, err)
	}
	cases := evidenceCases()
	rt := watchRuntimeEvents(t, n)
	for _, c := range cases {
		c.rt = rt
	}
	watchEvidence(t, n, cases)
	start := time.Now()
	for _, c := range cases {
		if _, err := n.kube.CoreV1().Pods(evidenceNS).Create(ctx, evidencePod(c), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", c.pod, err)
		}
	}
	for _, c := range cases {
		c.prepare(t, n)
	}
	t.Logf("%d pods running with their daemon, stopped child and exec'd process %v after create", len(cases), time.Since(start).Round(time.Millisecond))
	for _, c := range cases {
		t.Run(c.pod, func(t *testing.T) { c.run(t, n) })
	}
	if bad := rt.unparsed(); len(bad) > 0 {
		t.Errorf("containerd exit events that did not parse: %q", bad)
	}
	writeEvidence(t, filepath.Join(root, "bin", "e2e"), cases)
}

// evCase is one recording: a pod of one shape, its main process killed one way.
type evCase struct {
	pod   string
	shape podShape
	kind  killKind

	// before the kill (prepare)
	cgroups []cgroupDir
	procs   []proc // the old container's: main, daemon, stopped, exec
	others  []proc // the container beside it, if the shape has one
	all     []int  // every PID in the old container's cgroups
	exec    *execClient
	rt      *runtimeEvents

	mu      sync.Mutex
	events  []podObs
	armed   bool
	t0      time.Time
	oldID   string
	oldRest int32
	// from the watch, at the first event that showed it
	termAt, newAt   time.Time
	termSrc         string // "state" or "lastState": where the old container's terminated showed first
	term            *corev1.ContainerStateTerminated
	newID           string
	newRest         int32
	atTerm, atNew   *sample
	watchRestarts   int
	poll            *poller
	killingEvents   []string
	recordingFailed string // why the case could not be recorded, "" when it was
}

// watchEvidence watches the evidence namespace's pods until the test ends and hands each
// event, stamped with its receive time, to its case.
func watchEvidence(t testing.TB, n *node, cases []*evCase) {
	t.Helper()
	byName := map[string]*evCase{}
	for _, c := range cases {
		byName[c.pod] = c
	}
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Add(1)
	go func() {
		defer done.Done()
		rv := ""
		for ctx.Err() == nil {
			w, err := n.kube.CoreV1().Pods(evidenceNS).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			for e := range w.ResultChan() {
				at := time.Now()
				p, ok := e.Object.(*corev1.Pod)
				if e.Type == watch.Error || !ok {
					rv = ""
					break
				}
				rv = p.ResourceVersion
				if c := byName[p.Name]; c != nil && e.Type != watch.Bookmark {
					c.observe(podObs{At: at, Type: e.Type, Pod: p})
				}
			}
			w.Stop()
			for _, c := range cases {
				c.mu.Lock()
				c.watchRestarts++
				c.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		done.Wait()
	})
}

// observe records one event of the case's pod; once the case is armed, the first event that
// shows the old container terminated and the first that shows a new containerID each get a
// sample of the old container, taken here, before the next event is read.
func (c *evCase) observe(o podObs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, o)
	if !c.armed {
		return
	}
	cs := containerStatus(o.Pod, mainContainer)
	if cs == nil {
		return
	}
	if c.newAt.IsZero() && cs.ContainerID != "" && cs.ContainerID != c.oldID {
		s := takeSample(c.cgroups, append(c.procs, c.others...))
		c.newAt, c.atNew, c.newID, c.newRest = o.At, &s, cs.ContainerID, cs.RestartCount
	}
	if c.termAt.IsZero() {
		if term := terminatedAs(cs, c.oldID); term != nil {
			s := takeSample(c.cgroups, append(c.procs, c.others...))
			c.termAt, c.atTerm, c.term = o.At, &s, term
			c.termSrc = "state"
			if cs.State.Terminated == nil {
				c.termSrc = "lastState"
			}
		}
	}
}
