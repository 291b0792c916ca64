package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// keyState is what the contenders of one key share: the release time that
// the next holder turns into a handoff sample, and a count of local holders
// that detects two contenders holding the key at once.
type keyState struct {
	base        time.Time    // monotonic origin of lastRelease
	lastRelease atomic.Int64 // ns after base of the last release not yet followed by an acquire; 0: none
	holders     atomic.Int32 // contenders between acquire returned and release called
	overlaps    atomic.Int64 // acquires that found another holder
}

// since returns the time since base in ns, at least 1 (0 means "none").
func (k *keyState) since() int64 { return max(int64(time.Since(k.base)), 1) }

// tally is one contender's record of one run.
type tally struct {
	cycles    int             // completed (acquired and released) before the window closed
	latencies []time.Duration // count mode: each measured cycle, acquire call to release return
	handoffs  []time.Duration // shared key: previous holder's release call to our acquire return
}

// runLoops runs one loop per contender, all started together, until the
// window closes (or each did its cycles), and merges their tallies. Every
// goroutine it starts has returned when it returns.
func runLoops(ctx context.Context, cs []contender, m measurement) (*result, error) {
	base := time.Now()
	keys := make([]*keyState, len(cs))
	for i := range keys {
		if m.shared && i > 0 {
			keys[i] = keys[0]
			continue
		}
		keys[i] = &keyState{base: base}
	}

	limit := m.window
	if limit == 0 {
		limit = countCap
	}
	start := make(chan struct{})
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var deadline time.Time

	tallies := make([]tally, len(cs))
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			<-start
			tallies[i], errs[i] = loop(wctx, c, keys[i], m, deadline)
			if errs[i] != nil {
				cancel() // stop the others: the run is void
			}
		})
	}
	began := time.Now()
	deadline = began.Add(limit)
	timer := time.AfterFunc(limit, cancel)
	close(start) // publishes deadline to the loops
	wg.Wait()
	timer.Stop()
	elapsed := time.Since(began)

	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("contender %d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &result{m: m, window: m.window}
	if m.window == 0 {
		r.window = elapsed
	}
	rd := round{window: r.window}
	for i, t := range tallies {
		rd.perContender = append(rd.perContender, t.cycles)
		r.cycles += t.cycles
		r.latencies = append(r.latencies, t.latencies...)
		r.handoffs = append(r.handoffs, t.handoffs...)
		if i == 0 || !m.shared {
			r.overlaps += keys[i].overlaps.Load()
		}
	}
	rd.cycles = r.cycles
	r.rounds = []round{rd}
	if m.window == 0 && r.cycles < m.cycles*m.contenders {
		return nil, fmt.Errorf("only %d of %d cycles within %v", r.cycles, m.cycles*m.contenders, countCap)
	}
	return r, nil
}

// loop is one contender: acquire, release at once (hold 0), repeat, until
// wctx ends or it did its cycles. A lock acquired just before wctx ended is
// still released, within releaseTimeout.
func loop(wctx context.Context, c contender, k *keyState, m measurement, deadline time.Time) (tally, error) {
	var t tally
	for n := 0; m.cycles == 0 || n < m.warmup+m.cycles; n++ {
		t0 := time.Now()
		if err := c.acquire(wctx); err != nil {
			if wctx.Err() != nil {
				return t, nil // the window closed while waiting
			}
			return t, fmt.Errorf("acquire: %w", err)
		}
		acquired := k.since()
		if k.holders.Add(1) > 1 {
			k.overlaps.Add(1)
		}
		if prev := k.lastRelease.Swap(0); prev != 0 && m.shared && m.contenders > 1 {
			t.handoffs = append(t.handoffs, time.Duration(acquired-prev))
		}
		k.holders.Add(-1)
		k.lastRelease.Store(k.since()) // just before release
		rctx, cancel := context.WithTimeout(context.WithoutCancel(wctx), releaseTimeout)
		err := c.release(rctx)
		cancel()
		if err != nil {
			return t, fmt.Errorf("release: %w", err)
		}
		t1 := time.Now()
		if t1.After(deadline) {
			return t, nil
		}
		if n >= m.warmup {
			t.cycles++
			if m.cycles > 0 {
				t.latencies = append(t.latencies, t1.Sub(t0))
			}
		}
	}
	return t, nil
}

// errOverlap reports that two contenders held one key at once.
var errOverlap = errors.New("mutual exclusion violated: a contender acquired a key another contender held")
