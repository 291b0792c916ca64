package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// view prints a line whenever a lock's holder, token or phase changes, from a watch; for a
// lock of several slots, whenever one slot's does.
type view struct {
	k8s  client.WithWatch
	ns   string
	out  io.Writer
	mu   sync.Mutex
	last map[string]string
}

// run follows the locks until ctx ends, re-opening the watch if the API server closes it.
func (v *view) run(ctx context.Context) {
	for ctx.Err() == nil {
		w, err := v.k8s.Watch(ctx, &lockv1.DistributedLockList{}, client.InNamespace(v.ns))
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*lockv1.DistributedLock); ok && ev.Type != watch.Deleted {
				v.show(l)
			}
		}
		w.Stop()
	}
}

func (v *view) show(l *lockv1.DistributedLock) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range viewRows(l) {
		if v.last[r.key] == r.line {
			continue
		}
		v.last[r.key] = r.line
		fmt.Fprintf(v.out, "%s lock%s\n", time.Now().Format("15:04:05.000"), r.line)
	}
}

// viewRow is one line of the view: a lock, or one slot of a lock of several slots.
type viewRow struct{ key, line string }

// viewRows are the view's lines for l: one for a lock of one slot; one per slot, NAME[i] as
// kubectl dlock get shows them, for a lock of several (spec.slots, or slots still listed).
func viewRows(l *lockv1.DistributedLock) []viewRow {
	n := max(l.Spec.EffectiveSlots(), l.Status.SlotCount())
	if n == 1 {
		return []viewRow{{l.Name, viewLine(l.Name, &l.Status)}}
	}
	rows := make([]viewRow, n)
	for i := range n {
		name, s := fmt.Sprintf("%s[%d]", l.Name, i), l.Status.SlotView(i)
		rows[i] = viewRow{name, viewLine(name, &s)}
	}
	return rows
}

func viewLine(name string, s *lockv1.DistributedLockStatus) string {
	phase := string(s.Phase)
	if phase == "" {
		phase = "-"
	}
	return fmt.Sprintf("  %-16s phase=%-9s holder=%-12s token=%d", name, phase, orDash(s.Holder), s.FencingToken)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// waitLock polls the lock until cond holds or ctx ends.
func waitLock(ctx context.Context, k8s client.Client, ns, name string, timeout time.Duration, what string, cond func(*lockv1.DistributedLock) bool) (*lockv1.DistributedLock, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		var l lockv1.DistributedLock
		if err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &l); err == nil && cond(&l) {
			return &l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: %s: not within %v", name, what, timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// showWarnings says which Warning Events the controller recorded for the playground's locks
// so far (events.k8s.io), "none" when there are none.
func (p *playground) showWarnings(ctx context.Context) error {
	var evs eventsv1.EventList
	if err := p.k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	var seen []string
	for _, e := range evs.Items {
		if e.Type == corev1.EventTypeWarning && e.Regarding.Kind == "DistributedLock" {
			seen = append(seen, fmt.Sprintf("%s %s: %s", e.Regarding.Name, e.Reason, e.Note))
		}
	}
	if len(seen) == 0 {
		p.say("Warning Events of the locks: none")
		return nil
	}
	p.say("Warning Events of the locks: %d", len(seen))
	for _, w := range seen {
		p.say("  %s", w)
	}
	return nil
}
