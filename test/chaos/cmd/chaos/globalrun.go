package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// grun is one seeded global run: a namespace of the same name in both clusters, each with a
// Global lock of one spec.globalName, under a global etcd prefix of its own (T is never
// deleted, so every run starts from a name never granted), and one ledger.
type grun struct {
	g            *globalHarness
	sched        chaos.Schedule
	ns           string
	dir          string
	globalName   string
	globalPrefix string

	ledger    *proc
	ledgerURL string
	clusters  []*gcluster // east, west

	stopWatch context.CancelFunc // the shared etcd's watch
	watchWG   sync.WaitGroup

	mu         sync.Mutex
	shared     []chaos.GlobalEvent // the shared etcd's changes of the run's global name
	notes      []string
	faults     map[string]int
	marks      []faultMark
	liveness   []time.Duration
	violations []chaos.Violation
}

// globalSettle is how long a run goes on after its last liveness check.
const globalSettle = 3 * time.Second

// faultMark is one injected fault: which cluster held the term when it started, with which
// token, and when (CLOCK_MONOTONIC ns).
type faultMark struct {
	Kind    string `json:"kind"`
	Holder  string `json:"holder"` // "" when no cluster claimed the term
	Token   int64  `json:"token"`
	At      int64  `json:"at"`
	Healed  int64  `json:"healed"`
	Skipped bool   `json:"skipped,omitempty"` // nothing to act on
}

func newGlobalRun(g *globalHarness, sched chaos.Schedule) *grun {
	ns := fmt.Sprintf("global-%d-%d", sched.Seed, sched.Run)
	r := &grun{g: g, sched: sched, ns: ns, dir: filepath.Join(g.h.dir, fmt.Sprintf("global-run-%d", sched.Run)),
		globalName: ns + ".chaos", globalPrefix: "/chaos-global/" + ns, faults: map[string]int{}}
	for _, c := range []struct {
		name string
		h    *harness
	}{{"east", g.east}, {"west", g.west}} {
		cr := &run{h: c.h, sched: sched, ns: ns, dir: filepath.Join(r.dir, c.name), prefix: "/chaos/" + ns + "/" + c.name}
		r.clusters = append(r.clusters, &gcluster{name: c.name, r: cr})
	}
	return r
}

func (r *grun) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf("%7.3fs ", time.Since(r.g.h.t0).Seconds())+fmt.Sprintf(format, args...))
}

func (r *grun) violate(checker, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, chaos.Violation{Checker: checker, Detail: fmt.Sprintf(format, args...)})
}

// cluster returns the cluster named name, nil for none.
func (r *grun) cluster(name string) *gcluster {
	for _, c := range r.clusters {
		if c.name == name {
			return c
		}
	}
	return nil
}

// execute runs the schedule and checks the histories.
func (r *grun) execute(ctx context.Context) (*gresult, error) {
	start := time.Now()
	err := r.setup(ctx)
	if err == nil {
		err = r.inject(ctx)
	}
	if err == nil {
		// A paused worker resumed at the last heal gets to send what it would: the fence
		// must refuse it, and the histories must hold it.
		sleepCtx(ctx, globalSettle)
	}
	outs, terr := r.teardown(ctx)
	r.mu.Lock()
	_ = os.WriteFile(filepath.Join(r.dir, "timeline.txt"), []byte(strings.Join(r.notes, "\n")+"\n"), 0o644)
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if terr != nil {
		return nil, terr
	}
	res := r.check(outs)
	res.elapsed = time.Since(start)
	return res, nil
}

// setup starts the ledger, then each cluster's lock, manager and pods, and waits for the
// first write.
func (r *grun) setup(ctx context.Context) error {
	for _, c := range r.clusters {
		if err := os.MkdirAll(c.r.dir, 0o755); err != nil {
			return err
		}
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	if r.ledger, err = startProc(r.dir, "ledger", r.g.h.bins.ledger, nil, "ledger", "--listen", addr); err != nil {
		return err
	}
	r.ledgerURL = "http://" + addr
	if err := waitHTTP(ctx, r.ledgerURL+"/outcomes", 10*time.Second); err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	from, err := r.sharedRev(ctx)
	if err != nil {
		return fmt.Errorf("shared etcd: %w", err)
	}
	wctx, stop := context.WithCancel(ctx)
	r.stopWatch = stop
	r.watchWG.Go(func() { r.watchShared(wctx, from+1) })
	for _, c := range r.clusters {
		c.r.ledgerURL, c.r.ledgerURLs = r.ledgerURL, []string{r.ledgerURL}
		bg, stop := context.WithCancel(ctx)
		c.stopBG = stop
		if err := c.setup(ctx, bg, r); err != nil {
			return err
		}
	}
	if _, err := r.clusters[0].r.waitProgress(ctx, 90*time.Second); err != nil {
		return fmt.Errorf("no first write: %w", err)
	}
	return nil
}

// teardown stops everything the run started, cluster by cluster, and returns the ledger's
// decisions.
func (r *grun) teardown(ctx context.Context) ([]chaos.Outcome, error) {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for _, c := range r.clusters {
		if c.mgr != nil {
			c.mgr.stop()
		}
	}
	var outs []chaos.Outcome
	if r.ledgerURL != "" {
		if err := getJSON(ctx, r.ledgerURL+"/outcomes", 5*time.Second, &outs); err != nil {
			errs = append(errs, fmt.Errorf("read the ledger's outcomes: %w", err))
		}
	}
	for _, c := range r.clusters {
		stop := c.stopBG
		if stop == nil {
			stop = func() {}
		}
		if _, err := c.r.teardown(ctx, stop, &c.bgWG); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	if r.ledger != nil {
		r.ledger.stop(5 * time.Second)
	}
	if r.stopWatch != nil {
		r.stopWatch()
		r.watchWG.Wait()
	}
	return outs, errors.Join(errs...)
}
