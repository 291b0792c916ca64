package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// mono is a process-wide monotonic clock in nanoseconds.
var start = time.Now()

func mono() int64 { return int64(time.Since(start)) }

// serverCommands returns the total calls in INFO commandstats (commands run
// inside scripts included), less the INFO calls themselves.
func serverCommands(ctx context.Context, admin *redis.Client) (int64, error) {
	s, err := admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("read commandstats: %w", err)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
			continue
		}
		i := strings.Index(line, "calls=")
		j := strings.Index(line[i:], ",")
		n, err := strconv.ParseInt(line[i+6:i+j], 10, 64)
		if err == nil {
			total += n
		}
	}
	return total, nil
}

// counts is commands and requests over one measurement.
type counts struct{ commands, requests int64 }

func (c counts) add(o counts) counts { return counts{c.commands + o.commands, c.requests + o.requests} }

func measureCounts(ctx context.Context, admin *redis.Client, e *engine, f func() error) (counts, error) {
	c0, err := serverCommands(ctx, admin)
	if err != nil {
		return counts{}, err
	}
	r0 := e.requests.Load()
	if err := f(); err != nil {
		return counts{}, err
	}
	c1, err := serverCommands(ctx, admin)
	if err != nil {
		return counts{}, err
	}
	return counts{commands: c1 - c0, requests: e.requests.Load() - r0}, nil
}

// uncontended runs n acquire+release cycles on one key from one contender
// and returns each cycle's latency.
func uncontended(ctx context.Context, c contender, key string, n int) ([]time.Duration, error) {
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		unlock, err := c.lock(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", key, err)
		}
		if err := unlock(ctx); err != nil {
			return nil, fmt.Errorf("unlock %s: %w", key, err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}

// contended is the outcome of contenders looping on keys.
type contended struct {
	cycles   []int64         // per contender
	handoffs []time.Duration // release started -> next holder's acquire returned
	elapsed  time.Duration
	overlaps int64 // a holder saw another holder of its key (must be 0)
}

// add sums two runs: cycles per contender index, handoffs, time, overlaps.
func (r contended) add(o contended) contended {
	if r.cycles == nil {
		r.cycles = make([]int64, len(o.cycles))
	}
	for i, c := range o.cycles {
		r.cycles[i] += c
	}
	r.handoffs = append(r.handoffs, o.handoffs...)
	r.elapsed += o.elapsed
	r.overlaps += o.overlaps
	return r
}

func (r contended) total() int64 {
	var t int64
	for _, c := range r.cycles {
		t += c
	}
	return t
}

func (r contended) rate() float64 { return float64(r.total()) / r.elapsed.Seconds() }

// fairness is min/max cycles per contender.
func (r contended) fairness() float64 {
	if len(r.cycles) == 0 || slices.Max(r.cycles) == 0 {
		return 0
	}
	return float64(slices.Min(r.cycles)) / float64(slices.Max(r.cycles))
}

// contend runs the contenders for d, contender i on keyOf(i): acquire, hold
// for hold, release. A handoff is measured when the acquire returned after
// another contender's release of the same key began, and that release began
// after this acquire started (so this contender was waiting).
func contend(ctx context.Context, cs []contender, keyOf func(int) string, hold, d time.Duration) (contended, error) {
	res := contended{cycles: make([]int64, len(cs))}
	type keyState struct {
		releasedAt atomic.Int64
		holders    atomic.Int32
	}
	states := map[string]*keyState{}
	for i := range cs {
		if states[keyOf(i)] == nil {
			states[keyOf(i)] = &keyState{}
		}
	}
	var (
		mu       sync.Mutex
		handoffs []time.Duration
		firstErr error
	)
	stopAt := time.Now().Add(d)
	// A waiter still blocked a second after the run ends gives up: with a
	// queue someone is always waiting at the end, and a starved contender
	// shows in the fairness column, not as an error.
	runCtx, cancel := context.WithDeadline(ctx, stopAt.Add(time.Second))
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := states[keyOf(i)]
			for time.Now().Before(stopAt) {
				asked := mono()
				unlock, err := c.lock(runCtx, keyOf(i))
				if err != nil {
					if runCtx.Err() != nil {
						return // the run is over
					}
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("contender %d: lock: %w", i, err)
					}
					mu.Unlock()
					cancel()
					return
				}
				got := mono()
				if st.holders.Add(1) != 1 {
					atomic.AddInt64(&res.overlaps, 1)
				}
				if rel := st.releasedAt.Load(); rel > asked {
					mu.Lock()
					handoffs = append(handoffs, time.Duration(got-rel))
					mu.Unlock()
				}
				time.Sleep(hold)
				st.holders.Add(-1)
				st.releasedAt.Store(mono())
				if err := unlock(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("contender %d: unlock: %w", i, err)
					}
					mu.Unlock()
				}
				res.cycles[i]++
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	res.handoffs = handoffs
	return res, firstErr
}

// holdMany takes n locks (distinct keys) and holds them for d, so that only
// renewals run.
func holdMany(ctx context.Context, c contender, prefix string, n int, d time.Duration) (func(), error) {
	unlocks := make([]func(context.Context) error, 0, n)
	release := func() {
		for _, u := range unlocks {
			_ = u(ctx)
		}
	}
	for i := range n {
		u, err := c.lock(ctx, fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			release()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return release, nil
}

// pct returns the p-quantile (0..1) of ds.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
