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
}

func main() {
	var cfg config
	flag.IntVar(&cfg.uncontended, "uncontended", 2000, "uncontended acquire+release cycles per engine")
	flag.DurationVar(&cfg.hold, "hold", 2*time.Millisecond, "hold time of each contended cycle")
	flag.DurationVar(&cfg.contendFor, "contend-for", 5*time.Second, "duration of each shared-key run")
	flag.DurationVar(&cfg.distinctFor, "distinct-for", 3*time.Second, "duration of the distinct-keys run")
	flag.IntVar(&cfg.renewLocks, "renew-locks", 20, "locks held during the renewal-cost run")
	flag.DurationVar(&cfg.renewTTL, "renew-ttl", 3*time.Second, "lock TTL during the renewal-cost run")
	flag.DurationVar(&cfg.renewFor, "renew-for", 6*time.Second, "duration of the renewal-cost run")
	flag.DurationVar(&cfg.lockTTL, "ttl", 10*time.Second, "lock TTL in the acquire/release runs")
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
	for i, e := range engines(srv.Addr()) {
		r, err := measureEngine(ctx, admin, e, i, cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
		rep.results = append(rep.results, r)
		fmt.Fprintf(os.Stderr, "bench-redis: %s done (%v)\n", e.name, time.Since(began).Round(time.Second))
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

// result is one engine's numbers.
type result struct {
	e           *engine
	unc         []time.Duration
	uncCounts   counts
	shared      map[int]contended
	sharedCount map[int]counts
	distinct    contended
	renewCounts counts
}

func measureEngine(ctx context.Context, admin *redis.Client, e *engine, idx int, cfg config) (*result, error) {
	r := &result{e: e, shared: map[int]contended{}, sharedCount: map[int]counts{}}
	prefix := fmt.Sprintf("bench%d", idx)

	c, err := e.newContender(cfg.lockTTL)
	if err != nil {
		return nil, err
	}
	if _, err := uncontended(ctx, c, prefix+":warm", 100); err != nil {
		return nil, err
	}
	r.uncCounts, err = measureCounts(ctx, admin, e, func() error {
		var err error
		r.unc, err = uncontended(ctx, c, prefix+":uncontended", cfg.uncontended)
		return err
	})
	c.close()
	if err != nil {
		return nil, err
	}

	for _, n := range []int{8, 32} {
		cs, err := contenders(e, n, cfg.lockTTL)
		if err != nil {
			return nil, err
		}
		var res contended
		r.sharedCount[n], err = measureCounts(ctx, admin, e, func() error {
			var err error
			res, err = contend(ctx, cs, func(int) string { return fmt.Sprintf("%s:shared%d", prefix, n) }, cfg.hold, cfg.contendFor)
			return err
		})
		closeAll(cs)
		if err != nil {
			return nil, err
		}
		r.shared[n] = res
	}

	cs, err := contenders(e, 8, cfg.lockTTL)
	if err != nil {
		return nil, err
	}
	r.distinct, err = contend(ctx, cs, func(i int) string { return fmt.Sprintf("%s:distinct%d", prefix, i) }, cfg.hold, cfg.distinctFor)
	closeAll(cs)
	if err != nil {
		return nil, err
	}

	c, err = e.newContender(cfg.renewTTL)
	if err != nil {
		return nil, err
	}
	defer c.close()
	release, err := holdMany(ctx, c, prefix+":held", cfg.renewLocks, cfg.renewFor)
	if err != nil {
		return nil, err
	}
	r.renewCounts, err = measureCounts(ctx, admin, e, func() error { time.Sleep(cfg.renewFor); return nil })
	release()
	return r, err
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
