package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
)

// Bounds on calls outside the measured loops, so that a stuck etcd ends the
// run with an error instead of hanging it.
const (
	setupTimeout   = 30 * time.Second // opening or closing the sessions of one run
	releaseTimeout = 10 * time.Second // one release, also after the window closed
	countCap       = 5 * time.Minute  // an uncontended (count-bounded) run
)

// measurement is one row group of the report: how many contenders, on one
// shared key or one key each, for a fixed window or a fixed count of cycles.
type measurement struct {
	name       string
	contenders int
	shared     bool
	window     time.Duration // >0: each round runs for this long
	cycles     int           // >0: each round, each contender runs this many measured cycles
	warmup     int           // unmeasured cycles before them, each round (count mode)
}

var measurementList = []struct {
	name       string
	contenders int
	shared     bool
	count      bool
}{
	{"uncontended", 1, true, true},
	{"shared8", 8, true, false},
	{"shared32", 32, true, false},
	{floorRun, 1, true, false},
	{"distinct1", 1, false, false},
	{"distinct8", 8, false, false},
	{"distinct32", 32, false, false},
}

func measurementNames() []string {
	names := make([]string, len(measurementList))
	for i, m := range measurementList {
		names[i] = m.name
	}
	return names
}

func maxContenders() int {
	n := 0
	for _, m := range measurementList {
		n = max(n, m.contenders)
	}
	return n
}

func measurements(o options) []measurement {
	ms := make([]measurement, len(measurementList))
	for i, m := range measurementList {
		ms[i] = measurement{name: m.name, contenders: m.contenders, shared: m.shared}
		if m.count {
			ms[i].cycles, ms[i].warmup = (o.cycles+o.rounds-1)/o.rounds, 10
		} else {
			ms[i].window = o.duration / time.Duration(o.rounds)
		}
	}
	return ms
}

// bench is the embedded etcd, one client per contender slot (reused by every
// run, one run at a time), and the counters read around each run.
type bench struct {
	o       options
	srv     *etcdtest.Server
	admin   *clientv3.Client // compaction between runs; not counted
	clients []*clientv3.Client
	rpcs    *rpcCounter
}

func newBench(ctx context.Context, o options, n int) (*bench, error) {
	srv, err := etcdtest.New(etcdtest.WithFsync(true))
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: %w", err)
	}
	b := &bench{o: o, srv: srv, rpcs: newRPCCounter()}
	if b.admin, err = etcdtest.Dial([]string{srv.Endpoint()}); err != nil {
		return nil, errors.Join(err, b.close())
	}
	for range n {
		cli, err := etcdtest.Dial([]string{srv.Endpoint()}, b.rpcs.dialOptions()...)
		if err != nil {
			return nil, errors.Join(err, b.close())
		}
		b.clients = append(b.clients, cli)
	}
	// One round trip each, so that connection setup is not measured.
	for _, cli := range append([]*clientv3.Client{b.admin}, b.clients...) {
		cctx, cancel := context.WithTimeout(ctx, setupTimeout)
		_, err := cli.Get(cctx, "/bench/ping")
		cancel()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("first request to etcd: %w", err), b.close())
		}
	}
	return b, nil
}

// engines returns the engines that run measurement m: both locks, or, for
// the floor, the bare put loop alone.
func (b *bench) engines(m string) []engine {
	if m == floorRun {
		return []engine{floorEngine{}}
	}
	return []engine{lockwardenEngine{ttl: b.o.ttl}, mutexEngine{ttl: b.o.ttl}}
}

// close closes the clients, then stops etcd and removes its data.
func (b *bench) close() error {
	var errs []error
	for _, cli := range append([]*clientv3.Client{b.admin}, b.clients...) {
		if cli == nil {
			continue
		}
		if err := cli.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, fmt.Errorf("close etcd client: %w", err))
		}
	}
	b.srv.Close()
	return errors.Join(errs...)
}

// measure runs one round of m for eng: it opens one session per contender,
// runs the loops, closes the sessions and compacts etcd, so that every run
// starts from the same small keyspace.
func (b *bench) measure(ctx context.Context, eng engine, m measurement, round int) (*result, error) {
	prefix := fmt.Sprintf("/bench/%s/%s/r%d", m.name, strings.ReplaceAll(strings.ToLower(eng.name()), " ", "-"), round)
	cs := make([]contender, 0, m.contenders)
	closeAll := func() error {
		// Also after an interrupt: revoke the leases rather than leave them.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), setupTimeout)
		defer cancel()
		var errs []error
		for _, c := range cs {
			if err := c.close(cctx); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for i := range m.contenders {
		key := "shared"
		if !m.shared {
			key = fmt.Sprintf("key-%02d", i)
		}
		c, err := eng.newContender(ctx, b.clients[i], prefix, key, i)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("contender %d: %w", i, err), closeAll())
		}
		cs = append(cs, c)
	}

	before := b.snapshot()
	r, err := runLoops(ctx, cs, m)
	after := b.snapshot()
	if cerr := closeAll(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close sessions: %w", cerr))
	}
	if err != nil {
		return nil, err
	}
	r.usage = after.sub(before)
	if err := b.compact(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// compact compacts etcd's history up to now and waits for it.
func (b *bench) compact(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	resp, err := b.admin.Get(cctx, "/bench/ping")
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	_, err = b.admin.Compact(cctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	if err != nil && !errors.Is(err, rpctypes.ErrCompacted) { // nothing new since the last run
		return fmt.Errorf("compact: %w", err)
	}
	return nil
}
