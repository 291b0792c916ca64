//go:build e2e

package e2e

import (
	"slices"
	"strings"
	"sync"
	"time"
)

// poller samples the old container every millisecond from the kill on and keeps, for each
// process, the last moment it was certainly alive and the first it was certainly dead (see
// sample), and the same for the cgroup.
type poller struct {
	t0       time.Time
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	dead     map[string]time.Duration // role -> end of the first read that found it dead (zombie or gone), since t0
	reaped   map[string]time.Duration // role -> end of the first read that found it gone, since t0
	alive    map[string]time.Duration // role -> start of the last read that found it not dead, since t0
	unkilled map[string]time.Duration // role -> the same, for a read that found it not killed (no SIGKILL pending, not exiting)
	empty    time.Duration            // end of the first read that found every cgroup empty, -1 if never
	removed  time.Duration            // end of the first read that found every cgroup folder removed, -1 if never
	times    []time.Duration          // when each sample was taken, since t0
}

// startPoller samples cgs and procs until halt; times are since t0.
func startPoller(t0 time.Time, cgs []cgroupDir, procs []proc) *poller {
	cgs, procs = slices.Clone(cgs), slices.Clone(procs)
	p := &poller{
		t0: t0, stop: make(chan struct{}), done: make(chan struct{}), empty: -1, removed: -1,
		dead: map[string]time.Duration{}, reaped: map[string]time.Duration{}, alive: map[string]time.Duration{}, unkilled: map[string]time.Duration{},
	}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			s := takeSample(cgs, procs)
			p.note(s)
			// a reaped process and a removed cgroup never come back: stop reading them,
			// so that a sample takes less time on a busy machine
			cgs = slices.DeleteFunc(cgs, func(c cgroupDir) bool { return s.Gone[c.Hierarchy] })
			procs = slices.DeleteFunc(procs, func(pr proc) bool { return s.States[pr.Role] == "gone" })
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *poller) note(s sample) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.times = append(p.times, s.At.Sub(p.t0))
	for r := range s.States {
		start, end := s.ReadStart[r].Sub(p.t0), s.ReadEnd[r].Sub(p.t0)
		if !s.dead(r) {
			p.alive[r] = start
			if !strings.Contains(s.States[r], "killed") {
				p.unkilled[r] = start
			}
		}
		if _, seen := p.dead[r]; !seen && s.dead(r) {
			p.dead[r] = end
		}
		if _, seen := p.reaped[r]; !seen && s.States[r] == "gone" {
			p.reaped[r] = end
		}
	}
	// a cgroup read empty was empty when the reads ended (the at-the-event sample says
	// the same of its own moment)
	end := s.CgroupEnd.Sub(p.t0)
	if p.empty < 0 && s.empty() {
		p.empty = end
	}
	removed := true
	for _, g := range s.Gone {
		removed = removed && g
	}
	if p.removed < 0 && removed {
		p.removed = end
	}
}

// deadBy is the latest of the first-seen-dead times of roles, and whether every one of them
// was seen dead.
func (p *poller) deadBy(roles []string) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var last time.Duration
	for _, r := range roles {
		d, ok := p.dead[r]
		if !ok {
			return 0, false
		}
		last = max(last, d)
	}
	return last, true
}

// aliveAfter lists the roles read alive by a read that began after d (since t0), and of
// those the ones read alive and not yet killed after d.
func (p *poller) aliveAfter(d time.Duration, roles []string) (alive, unkilled []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range roles {
		if a, ok := p.alive[r]; ok && a > d {
			alive = append(alive, r)
		}
		if a, ok := p.unkilled[r]; ok && a > d {
			unkilled = append(unkilled, r)
		}
	}
	return alive, unkilled
}

// maxGap is the longest time between two samples.
func (p *poller) maxGap() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(p.times); i++ {
		gap = max(gap, p.times[i]-p.times[i-1])
	}
	return gap
}

// lastAlive is the last time any of roles was seen alive, -1 if none ever was.
func (p *poller) lastAlive(roles []string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	last := time.Duration(-1)
	for _, r := range roles {
		if a, ok := p.alive[r]; ok && a > last {
			last = a
		}
	}
	return last
}

// settled reports whether every process of roles is dead and every cgroup folder removed.
func (p *poller) settled(roles []string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range roles {
		if _, ok := p.dead[r]; !ok {
			return false
		}
	}
	return p.removed >= 0
}

// halt stops the sampling and waits for it.
func (p *poller) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
	}
	<-p.done
}
