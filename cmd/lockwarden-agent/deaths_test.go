package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// deathPoll is how often the watcher looks at each process it follows.
const deathPoll = 2 * time.Millisecond

// lifetime is one process the agent started (a child, or a grandchild in its group): when it
// recorded its start, and the first time the watcher saw it dead (gone or a zombie), an upper
// bound of its death.
type lifetime struct {
	rec  record
	dead int64 // CLOCK_MONOTONIC ns; 0 while alive
}

// watcher follows every process an agent's child file names, from outside the agent.
type watcher struct {
	a    *agent
	mu   sync.Mutex
	byID map[int]*lifetime
	stop chan struct{}
	done chan struct{}
}

// watch starts following a's processes until cleanup.
func watch(t *testing.T, a *agent) *watcher {
	w := &watcher{a: a, byID: map[int]*lifetime{}, stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop()
	t.Cleanup(func() {
		close(w.stop)
		<-w.done
	})
	return w
}

func (w *watcher) loop() {
	defer close(w.done)
	t := time.NewTicker(deathPoll)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		recs := w.a.records()
		w.mu.Lock()
		for _, r := range recs {
			if (r.kind == "start" || r.kind == "grandchild") && w.byID[r.pid] == nil {
				w.byID[r.pid] = &lifetime{rec: r}
			}
		}
		for pid, l := range w.byID {
			if l.dead == 0 && dead(pid) {
				l.dead = monoNow()
			}
		}
		w.mu.Unlock()
	}
}

// dead reports whether pid has exited: no such process, or a zombie.
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return true
	}
	return s[i+2] == 'Z' || s[i+2] == 'X'
}

// lifetimes returns the processes seen so far, oldest start first.
func (w *watcher) lifetimes() []lifetime {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ls []lifetime
	for _, l := range w.byID {
		ls = append(ls, *l)
	}
	for i := 1; i < len(ls); i++ {
		for j := i; j > 0 && ls[j].rec.at < ls[j-1].rec.at; j-- {
			ls[j], ls[j-1] = ls[j-1], ls[j]
		}
	}
	return ls
}

// allDead reports whether at least n processes were seen and all are dead.
func (w *watcher) allDead(n int) bool {
	ls := w.lifetimes()
	if len(ls) < n {
		return false
	}
	for _, l := range ls {
		if l.dead == 0 {
			return false
		}
	}
	return true
}

// termAt is when pid recorded SIGTERM, or 0.
func (a *agent) termAt(pid int) int64 {
	for _, r := range a.records() {
		if r.kind == "term" && r.pid == pid {
			return r.at
		}
	}
	return 0
}

// checkWithinValidity fails the test for every process of a that was alive after the
// validity its newest earlier read could have given: a consistent read sent at S keeps a
// term valid until S + L - margin, and S comes before the proxy forwards the read, so the
// forward time of the last GET before t, plus L - margin, bounds the validity at t from
// above. It also checks each child's token was granted to a's pod.
func checkWithinValidity(t *testing.T, f *fixture, a *agent, w *watcher) {
	t.Helper()
	l := f.get()
	for _, lt := range w.lifetimes() {
		if lt.dead == 0 {
			t.Errorf("%s: process %d (%s, token %d) still alive", a.name, lt.rec.pid, lt.rec.kind, lt.rec.token)
			continue
		}
		if lt.rec.token == 0 || !grantedTo(l, a.uid, lt.rec.token) {
			t.Errorf("%s: process %d ran with LOCKWARDEN_TOKEN %d, not a token granted to %s (status %+v)", a.name, lt.rec.pid, lt.rec.token, a.name, l.Status)
		}
		read := a.reads.lastBefore(lt.dead)
		bound := read + int64(validFor())
		if read == 0 || lt.dead > bound {
			t.Errorf("%s: process %d (%s, token %d) seen dead %v after the validity bound (last read forwarded %v before its death, validity %v)",
				a.name, lt.rec.pid, lt.rec.kind, lt.rec.token, time.Duration(lt.dead-bound), time.Duration(lt.dead-read), validFor())
		} else {
			t.Logf("%s: process %d (%s, token %d) ran %v, seen dead %v before the validity bound",
				a.name, lt.rec.pid, lt.rec.kind, lt.rec.token, time.Duration(lt.dead-lt.rec.at).Round(time.Millisecond), time.Duration(bound-lt.dead).Round(time.Millisecond))
		}
	}
}
