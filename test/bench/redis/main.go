// Command redis benchmarks pkg/redislock against bsm/redislock, redsync and
// rueidislock on one real redis-server, side by side in one run, and prints a
// markdown report (make bench-redis). See docs/benchmarks.md, "Redis".
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
)

type config struct {
	uncontended int
	hold        time.Duration
	contendFor  time.Duration
	distinctFor time.Duration
	renewLocks  int
	renewTTL    time.Duration
	renewFor    time.Duration
	lockTTL     time.Duration
	floorFor    time.Duration
}

func main() {
	var cfg config
	flag.IntVar(&cfg.uncontended, "uncontended", 6000, "uncontended acquire+release cycles per engine (a p50 of 0.1 ms moves by its noise below a few thousand)")
	flag.DurationVar(&cfg.hold, "hold", 2*time.Millisecond, "hold time of each contended cycle")
	flag.DurationVar(&cfg.contendFor, "contend-for", 5*time.Second, "duration of each shared-key run")
	flag.DurationVar(&cfg.distinctFor, "distinct-for", 3*time.Second, "duration of the distinct-keys run")
	flag.IntVar(&cfg.renewLocks, "renew-locks", 20, "locks held during the renewal-cost run")
	flag.DurationVar(&cfg.renewTTL, "renew-ttl", 3*time.Second, "lock TTL during the renewal-cost run")
	flag.DurationVar(&cfg.renewFor, "renew-for", 9*time.Second, "duration of the renewal-cost run (split over the rounds)")
	flag.DurationVar(&cfg.lockTTL, "ttl", 10*time.Second, "lock TTL in the acquire/release runs")
	flag.DurationVar(&cfg.floorFor, "floor-for", 3*time.Second, "duration of each bare SET/DEL floor measurement (split over the rounds)")
	flag.Parse()
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench-redis:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	dir, err := os.MkdirTemp("", "bench-redis-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := redistest.New(dir, redistest.Config{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	began := time.Now()
	rep := &report{cfg: cfg, began: began.UTC(), nproc: runtime.NumCPU()}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		rep.load = string(la[:len(la)-1])
	}
	rep.redisVersion = redisVersion(ctx, admin)
	es := engines(srv.Addr())
	for _, e := range es {
		rep.results = append(rep.results, &result{e: e, shared: map[row]contended{}, sharedCount: map[row]counts{}})
	}
	// Every scenario runs in rounds, the engines in a rotated order each
	// round, so that a burst of load from the rest of the machine does not
	// land on one engine only; each engine's rounds are added up.
	for _, sc := range scenarios(cfg) {
		for round := range rounds {
			if sc.floor {
				if err := rep.measureFloor(ctx, srv.Addr(), cfg.floorFor/rounds); err != nil {
					return fmt.Errorf("floor: %w", err)
				}
			}
			for k := range es {
				i := (k + round) % len(es)
				if err := sc.run(ctx, admin, rep.results[i], i, cfg); err != nil {
					return fmt.Errorf("%s, %s: %w", es[i].name, sc.name, err)
				}
			}
		}
		fmt.Fprintf(os.Stderr, "bench-redis: %s done (%v)\n", sc.name, time.Since(began).Round(time.Second))
	}
	if rep.wait, err = measureWait(ctx, cfg.uncontended); err != nil {
		return fmt.Errorf("wait cost: %w", err)
	}
	rep.took = time.Since(began)
	rep.write(os.Stdout)
	return nil
}

func redisVersion(ctx context.Context, admin *redis.Client) string {
	s, err := admin.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	var v string
	for _, line := range splitLines(s) {
		if n, ok := cut(line, "redis_version:"); ok {
			v = n
		}
	}
	return v
}

// rounds is how many times each scenario runs per engine.
const rounds = 3

// result is one engine's numbers, summed over the rounds.
type result struct {
	e           *engine
	unc         []time.Duration
	uncCounts   counts
	shared      map[row]contended
	sharedCount map[row]counts
	distinct    contended
	renewCounts counts
	renewFor    time.Duration
}

// scenario is one row group of the report, run for one engine per call.
type scenario struct {
	name  string
	run   func(ctx context.Context, admin *redis.Client, r *result, idx int, cfg config) error
	floor bool // measure the bare SET/DEL floor at the start of each round
}

// row is one shared-key row: contenders on one key, each holding it for hold.
type row struct {
	n    int
	hold time.Duration
}

// sharedRows are the shared-key rows: the configured hold, which bounds
// every engine at about 1/(hold + handoff) and so shows fairness, and hold 0,
// where the handoff is the whole cycle.
func sharedRows(cfg config) []row {
	return []row{{8, cfg.hold}, {32, cfg.hold}, {8, 0}, {32, 0}}
}

func scenarios(cfg config) []scenario {
	sc := []scenario{{name: "uncontended", run: runUncontended}}
	for _, rw := range sharedRows(cfg) {
		sc = append(sc, scenario{name: fmt.Sprintf("shared key, %d contenders, hold %v", rw.n, rw.hold), floor: rw.hold == 0,
			run: func(ctx context.Context, admin *redis.Client, r *result, idx int, cfg config) error {
				return runShared(ctx, admin, r, idx, cfg, rw)
			}})
	}
	return append(sc, scenario{name: "distinct keys", run: runDistinct}, scenario{name: "renewal cost", run: runRenewal})
}

func runUncontended(ctx context.Context, admin *redis.Client, r *result, idx int, cfg config) error {
	c, err := r.e.newContender(cfg.lockTTL)
	if err != nil {
		return err
	}
	defer c.close()
	key := fmt.Sprintf("bench%d:uncontended", idx)
	if _, err := uncontended(ctx, c, key, 50); err != nil { // connections, scripts
		return err
	}
	k, err := measureCounts(ctx, admin, r.e, func() error {
		lat, err := uncontended(ctx, c, key, cfg.uncontended/rounds)
		r.unc = append(r.unc, lat...)
		return err
	})
	r.uncCounts = r.uncCounts.add(k)
	return err
}

func runShared(ctx context.Context, admin *redis.Client, r *result, idx int, cfg config, rw row) error {
	cs, err := contenders(r.e, rw.n, cfg.lockTTL)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	var res contended
	k, err := measureCounts(ctx, admin, r.e, func() error {
		var err error
		key := fmt.Sprintf("bench%d:shared%d-%v", idx, rw.n, rw.hold)
		res, err = contend(ctx, cs, func(int) string { return key }, rw.hold, cfg.contendFor/rounds)
		return err
	})
	r.shared[rw] = r.shared[rw].add(res)
	r.sharedCount[rw] = r.sharedCount[rw].add(k)
	return err
}

func runDistinct(ctx context.Context, _ *redis.Client, r *result, idx int, cfg config) error {
	cs, err := contenders(r.e, 8, cfg.lockTTL)
	if err != nil {
		return err
	}
	defer closeAll(cs)
	res, err := contend(ctx, cs, func(i int) string { return fmt.Sprintf("bench%d:distinct%d", idx, i) }, cfg.hold, cfg.distinctFor/rounds)
	r.distinct = r.distinct.add(res)
	return err
}

func runRenewal(ctx context.Context, admin *redis.Client, r *result, idx int, cfg config) error {
	c, err := r.e.newContender(cfg.renewTTL)
	if err != nil {
		return err
	}
	defer c.close()
	release, err := holdMany(ctx, c, fmt.Sprintf("bench%d:held", idx), cfg.renewLocks, cfg.renewFor)
	if err != nil {
		return err
	}
	defer release()
	d := cfg.renewFor / rounds
	k, err := measureCounts(ctx, admin, r.e, func() error { time.Sleep(d); return nil })
	r.renewCounts = r.renewCounts.add(k)
	r.renewFor += d
	return err
}

func contenders(e *engine, n int, ttl time.Duration) ([]contender, error) {
	cs := make([]contender, 0, n)
	for range n {
		c, err := e.newContender(ttl)
		if err != nil {
			closeAll(cs)
			return nil, err
		}
		cs = append(cs, c)
	}
	return cs, nil
}

func closeAll(cs []contender) {
	for _, c := range cs {
		c.close()
	}
}
