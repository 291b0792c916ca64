// Command chaos is lockwarden's fault-injection harness. It starts a real control plane
// (envtest's kube-apiserver), a 3-member etcd cluster (./bin/etcd) behind TCP proxies, and
// for every seeded run two manager processes (built with -tags chaos), three worker
// processes (test/chaos/cmd/chaosworker) with their pods and API server proxies, a stand-in
// kubelet that writes the sequences a real kubelet was recorded writing (podstatus.go), and a
// fenced ledger process; it injects the run's faults, heals them, and checks
// the histories (package chaos). Runs share the control plane and the etcd cluster; each has
// its own namespace, lock, etcd prefix and ledger.
//
//	go run ./test/chaos/cmd/chaos -seed 1 -runs 10         # make chaos SEED=1 RUNS=10
//	go run ./test/chaos/cmd/chaos -seed 1 -duration 30m    # make chaos-long DURATION=30m
//	go run ./test/chaos/cmd/chaos -ci                      # make chaos-ci
//	go run ./test/chaos/cmd/chaos -global -seed 1 -runs 4  # make chaos-global SEED=1 RUNS=4
//
// With -global it runs the global mode instead (global.go): two control planes, east and
// west, one manager each (--cluster-name, one --global-etcd-prefix), contending for one scope
// Global lock on the shared etcd, their workers writing to one ledger; it ends with a
// "summary:" line (runs, violations, failover p50 and max, the bound G + D + 1 s).
//
// It prints one line per run and ends with "violations: <n>"; a run with a violation is
// saved under test/chaos/out/ with the command that replays it. It exits 1 on a violation
// or a harness error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// options are the command's flags.
type options struct {
	seed     uint64
	runs     int
	first    int
	duration time.Duration
	ci       bool
	extra    int
	kinds    string
	keep     bool
	manager  string
	worker   string
	global   bool
}

type binaries struct{ manager, worker, ledger, agent string }

// harness is what every run shares.
type harness struct {
	opts       options
	root       string
	dir        string // scratch: process logs, histories, data dirs
	outDir     string // test/chaos/out
	bins       binaries
	timing     chaos.Timing
	kinds      []string
	cp         *testenv.Env
	kubeconfig string
	k8s        client.WithWatch
	cs         *kubernetes.Clientset
	etcd       *cluster
	etcdGen    int
	t0         time.Time
}

func main() {
	var o options
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the schedules")
	flag.IntVar(&o.runs, "runs", 10, "number of runs (ignored with -duration)")
	flag.IntVar(&o.first, "first", 0, "index of the first run (to replay one run of a seed)")
	flag.DurationVar(&o.duration, "duration", 0, "run until this much time has passed, then print totals")
	flag.BoolVar(&o.ci, "ci", false, "the bounded CI set: one run per fault kind (each kind the first fault of one run), one extra fault at most")
	flag.IntVar(&o.extra, "extra", 2, "at most this many random faults after each run's first")
	flag.StringVar(&o.kinds, "kinds", "", "comma-separated fault kinds to draw from (default: all)")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory (process logs of every run)")
	flag.StringVar(&o.worker, "worker", "", "a chaosworker binary to run instead of building ./test/chaos/cmd/chaosworker (e.g. against another commit's pkg/lease)")
	flag.StringVar(&o.manager, "manager", "", "a lockwarden binary built with -tags chaos to run instead of building ./cmd/lockwarden (e.g. from another commit)")
	flag.BoolVar(&o.global, "global", false, "the global mode: two clusters contend for one scope Global lock over the shared etcd (global.go; -seed, -first, -runs, -keep, -manager, -worker apply)")
	flag.Parse()
	if o.ci {
		o.extra, o.duration = 1, 0 // runs: one per kind, once the kinds are known
	}
	ctrllog.SetLogger(logr.Discard()) // envtest logs through controller-runtime; the processes log to files
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	entry := mainRun
	if o.global {
		entry = mainGlobal
	}
	code := entry(ctx, o)
	stop()
	os.Exit(code)
}

func mainRun(ctx context.Context, o options) int {
	h := &harness{opts: o, t0: time.Now(), kinds: chaos.Kinds,
		timing: chaos.Timing{Lease: 3 * time.Second, LockDelay: 3 * time.Second, ElectionTTL: 5 * time.Second}}
	if o.kinds != "" {
		h.kinds = strings.Split(o.kinds, ",")
		for _, k := range h.kinds {
			if !known(k) {
				fmt.Fprintf(os.Stderr, "chaos: -kinds: unknown kind %q (known: %s)\n", k, strings.Join(chaos.Kinds, ","))
				return 2
			}
		}
	}
	if o.ci {
		o.runs = len(h.kinds)
		h.opts.runs = o.runs
	}
	if err := h.start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		h.close()
		return 1
	}
	defer h.close()
	var tot totals
	errCount := 0
	for i := o.first; ; i++ {
		if o.duration > 0 {
			if time.Since(h.t0) > o.duration {
				break
			}
		} else if i >= o.first+o.runs {
			break
		}
		if ctx.Err() != nil {
			break
		}
		if err := h.ensureEtcd(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			errCount++
			break
		}
		sched := chaos.NewSchedule(o.seed, i, h.kinds, o.extra, h.timing)
		r := &run{h: h, sched: sched, ns: fmt.Sprintf("chaos-%d-%d", o.seed, i), dir: filepath.Join(h.dir, fmt.Sprintf("run-%d", i))}
		r.prefix = "/chaos/" + r.ns
		res, err := r.execute(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			errCount++
			fmt.Printf("run %d seed %d schedule %s faults %s: harness error: %v (logs: %s; replay: %s)\n",
				i, o.seed, sched.Hash(), kindList(sched.Counts()), err, r.dir, h.replay(sched))
			h.opts.keep = true
			continue
		}
		tot.add(res)
		fmt.Println(res.line())
		for _, v := range res.violations {
			fmt.Printf("  VIOLATION %s\n", v)
		}
		if res.saved != "" {
			fmt.Printf("  saved %s; replay: %s\n", res.saved, h.replay(sched))
		}
	}
	if o.duration > 0 || o.ci || tot.runs > 1 {
		tot.print(time.Since(h.t0))
	} else {
		fmt.Printf("violations: %d\n", tot.violations)
	}
	if errCount > 0 {
		fmt.Printf("harness errors: %d\n", errCount)
	}
	unexercised := 0
	if o.duration > 0 && ctx.Err() == nil {
		unexercised = tot.unexercised(h.kinds)
	}
	if tot.violations > 0 || errCount > 0 || unexercised > 0 {
		return 1
	}
	return 0
}

func known(k string) bool {
	for _, x := range chaos.Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// replay is the command that runs sched again.
func (h *harness) replay(s chaos.Schedule) string {
	cmd := fmt.Sprintf("go run ./test/chaos/cmd/chaos -seed %d -first %d -runs 1 -extra %d", s.Seed, s.Run, h.opts.extra)
	if h.opts.kinds != "" {
		cmd += " -kinds " + h.opts.kinds
	}
	return cmd
}

// start builds the binaries and starts the control plane and the etcd cluster.
func (h *harness) start(ctx context.Context) error {
	var err error
	if h.root, err = testenv.RepoRoot(); err != nil {
		return err
	}
	h.outDir = filepath.Join(h.root, "test", "chaos", "out")
	if h.dir, err = os.MkdirTemp("", "lockwarden-chaos-"); err != nil {
		return err
	}
	for _, tool := range []string{"etcd", "etcdutl", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(h.root, "bin", tool)); err != nil {
			return fmt.Errorf("bin/%s missing: run `make tools`", tool)
		}
	}
	bin := filepath.Join(h.dir, "bin")
	h.bins = binaries{manager: filepath.Join(bin, "lockwarden-chaos"), worker: filepath.Join(bin, "chaosworker"), ledger: filepath.Join(bin, "fenced-worker"),
		agent: filepath.Join(bin, "lockwarden-agent")}
	builds := []struct{ out, pkg, tags string }{
		{h.bins.manager, "./cmd/lockwarden", "chaos"},
		{h.bins.worker, "./test/chaos/cmd/chaosworker", ""},
		{h.bins.ledger, "./examples/fenced-worker", ""},
		{h.bins.agent, "./cmd/lockwarden-agent", ""},
	}
	if h.opts.manager != "" {
		if _, err := os.Stat(h.opts.manager); err != nil {
			return fmt.Errorf("-manager: %w", err)
		}
		h.bins.manager, builds = h.opts.manager, builds[1:]
	}
	if h.opts.worker != "" {
		if _, err := os.Stat(h.opts.worker); err != nil {
			return fmt.Errorf("-worker: %w", err)
		}
		h.bins.worker = h.opts.worker
		for i, b := range builds {
			if b.out == filepath.Join(bin, "chaosworker") {
				builds = append(builds[:i], builds[i+1:]...)
				break
			}
		}
	}
	for _, b := range builds {
		cmd := exec.CommandContext(ctx, "go", "build", "-tags", b.tags, "-o", b.out, b.pkg)
		cmd.Dir, cmd.Stdout, cmd.Stderr = h.root, os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build %s: %w", b.pkg, err)
		}
	}
	if h.cp, err = testenv.Start(); err != nil {
		return err
	}
	h.kubeconfig = filepath.Join(h.dir, "kubeconfig")
	if err := h.cp.Kubeconfig(h.kubeconfig); err != nil {
		return err
	}
	if h.k8s, h.cs, err = clients(*h.cp.Config); err != nil {
		return err
	}
	if h.etcd, err = startCluster(h.root, filepath.Join(h.dir, "etcd"), 3); err != nil {
		return err
	}
	if h.opts.global { // its own bounds: mainGlobal prints them
		fmt.Printf("chaos: east's control plane and the 3-member etcd up in %v; seed %d\n", time.Since(h.t0).Round(100*time.Millisecond), h.opts.seed)
		return nil
	}
	fmt.Printf("chaos: control plane and 3-member etcd up in %v; seed %d; lease %v, lockDelay %v, election-ttl %v; liveness bound %v\n",
		time.Since(h.t0).Round(100*time.Millisecond), h.opts.seed, h.timing.Lease, h.timing.LockDelay, h.timing.ElectionTTL, h.livenessBound())
	return nil
}

// clients returns the harness's clients of the API server of cfg.
func clients(cfg rest.Config) (client.WithWatch, *kubernetes.Clientset, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	if err := lockv1.AddToScheme(scheme); err != nil {
		return nil, nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	k8s, err := client.NewWithWatch(&cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(&cfg)
	if err != nil {
		return nil, nil, err
	}
	return k8s, cs, nil
}

// ensureEtcd checks that the shared etcd cluster serves; one that does not is replaced by a
// new cluster, and that is reported, so that one broken run does not fail every run after
// it. (The one cause seen, peer proxies that stopped accepting after a member was down, is
// fixed in etcdtest.StartProxy.)
func (h *harness) ensureEtcd() error {
	if err := h.etcd.waitHealthy(15 * time.Second); err == nil {
		return nil
	} else {
		fmt.Printf("chaos: etcd cluster unhealthy before the next run (%v); replacing it\n", err)
	}
	h.etcd.close()
	h.etcdGen++
	var err error
	h.etcd, err = startCluster(h.root, filepath.Join(h.dir, fmt.Sprintf("etcd-%d", h.etcdGen)), 3)
	return err
}

// close stops the cluster and the control plane and removes the scratch directory.
func (h *harness) close() {
	if h.etcd != nil {
		h.etcd.close()
	}
	if h.cp != nil {
		if err := h.cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
	}
	if h.dir != "" {
		if h.opts.keep {
			fmt.Printf("chaos: scratch directory kept: %s\n", h.dir)
			return
		}
		if err := os.RemoveAll(h.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
	}
}
