// Command compare benchmarks lockwarden side by side with client-go's tools/leaderelection
// on one local control plane (kube-apiserver and etcd from ./bin via envtest) and, for
// lockwarden, a separate etcd and the bin/lockwarden manager as its own process. It writes
// sections 2 to 6 of docs/benchmarks.md (section 1, the engine, comes from `make bench-lease`):
//
//  2. planned handoff, lockwarden vs client-go with ReleaseOnCancel, at 15/10/2 s and 5/3/1 s;
//  3. crash failover at lease 15 s and 5 s: client-go vs lockwarden with the termination
//     attested (a) and not attested (b);
//  4. steady-state load of 100 locks x 3 candidates: API server and etcd requests per second;
//  5. scale: 1,000 and 10,000 locks on one controller;
//  6. status latency: the grant's etcd commit -> the pods see the new holder.
//
// Every section starts a fresh control plane, so its counters and caches start empty. The
// markdown goes to stdout; with -out it also replaces this program's sections of that file
// (every other section is kept as it is) and -img receives the PNG plots. Progress goes to
// stderr. Usage: go run ./test/bench/compare [-quick] [-out docs/benchmarks.md -img docs/img]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
)

// options are the command-line flags.
type options struct {
	quick           bool
	out             string // markdown file whose sections this program replaces; "" = none
	img             string // directory of the PNG plots
	engineReport    string // bench-lease's output to put into the Engine section
	only            map[string]bool
	handoffs        int
	crashSamples    int
	crashLeases     []time.Duration
	crashSpread     time.Duration
	probePeriod     time.Duration
	probeFailures   int
	loadLocks       int
	loadDuration    time.Duration
	scale           []int
	scaleTimeout    time.Duration
	reconciles      int
	finalizerPolicy bool
	args            []string
	pprofDir        string
}

var sectionNames = []string{"handoff", "crash", "load", "scale"}

func parseFlags(args []string) (options, error) {
	o := options{args: args}
	var only, scale, leases string
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.BoolVar(&o.quick, "quick", false, "smaller counts for development (about 4 minutes): -handoffs 8 -crash-samples 6 -crash-leases 5s -load-locks 20 -load-duration 15s -scale 200 -scale-timeout 45s, unless set")
	fs.StringVar(&o.out, "out", "", "markdown file in which to replace this program's sections (created if missing); empty: stdout only")
	fs.StringVar(&o.img, "img", "", "directory for the PNG plots (default: img/ beside -out; none without -out)")
	fs.StringVar(&o.engineReport, "engine-report", "", "file with bench-lease's output, put into the Engine section between its markers")
	fs.StringVar(&only, "only", "", "comma-separated sections to run (default all): "+strings.Join(sectionNames, ","))
	fs.IntVar(&o.handoffs, "handoffs", 40, "planned handoffs per system and timing (after one warm-up)")
	fs.IntVar(&o.crashSamples, "crash-samples", 30, "crash failovers per system, variant and lease, on as many independent locks at once")
	fs.StringVar(&leases, "crash-leases", "15s,5s", "lease durations of the crash failover")
	fs.DurationVar(&o.crashSpread, "crash-spread", 10*time.Second, "the crashes of one run are spread evenly over this window")
	fs.DurationVar(&o.probePeriod, "probe-period", time.Second, "crash variant (b): readiness probe periodSeconds")
	fs.IntVar(&o.probeFailures, "probe-failures", 3, "crash variant (b): readiness probe failureThreshold")
	fs.IntVar(&o.loadLocks, "load-locks", 100, "steady-state load: locks (3 candidates each) per system")
	fs.DurationVar(&o.loadDuration, "load-duration", 60*time.Second, "steady-state load: measured window per system")
	fs.StringVar(&scale, "scale", "1000,10000", "scale: lock counts (3 candidate pods each); the section ends with a summary line of the largest")
	fs.DurationVar(&o.scaleTimeout, "scale-timeout", 2*time.Minute, "scale: give up waiting for every lock to be held after this long")
	fs.StringVar(&o.pprofDir, "pprof", "", "scale: write CPU profiles of kube-apiserver and the manager (20 s, while the largest count is being granted) into this directory and summarise them in the report")
	fs.StringVar(&logDir, "logs", "", "copy each manager's log into this directory (for diagnosis)")
	fs.StringVar(&managerBin, "manager", "", "the manager binary to run (default bin/lockwarden): another build, for an A/B comparison")
	fs.IntVar(&o.reconciles, "max-concurrent-reconciles", 0, "scale: the manager's --max-concurrent-reconciles (0: its default)")
	fs.BoolVar(&o.finalizerPolicy, "finalizer-policy", true, "scale: install config/policy's finalizer policy (MutatingAdmissionPolicy) before the locks are created; false: the holder-release policy only, so the manager sets each finalizer itself")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		quick := map[string]func(){
			"handoffs":      func() { o.handoffs = 8 },
			"crash-samples": func() { o.crashSamples = 6 },
			"crash-leases":  func() { leases = "5s" },
			"crash-spread":  func() { o.crashSpread = 3 * time.Second },
			"load-locks":    func() { o.loadLocks = 20 },
			"load-duration": func() { o.loadDuration = 15 * time.Second },
			"scale":         func() { scale = "200" },
			"scale-timeout": func() { o.scaleTimeout = 45 * time.Second },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	for _, f := range strings.Split(leases, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 3*time.Second || d%time.Second != 0 {
			return o, fmt.Errorf("-crash-leases: %q is not a whole number of seconds of at least 3s", f)
		}
		o.crashLeases = append(o.crashLeases, d)
	}
	for _, f := range strings.Split(scale, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 50000 {
			return o, fmt.Errorf("-scale: %q is not a count between 1 and 50000", f)
		}
		o.scale = append(o.scale, n)
	}
	switch {
	case o.handoffs < 1 || o.handoffs > 1000:
		return o, fmt.Errorf("-handoffs %d must be between 1 and 1000", o.handoffs)
	case o.crashSamples < 1 || o.crashSamples > 500:
		return o, fmt.Errorf("-crash-samples %d must be between 1 and 500", o.crashSamples)
	case o.loadLocks < 1 || o.loadLocks > 2000:
		return o, fmt.Errorf("-load-locks %d must be between 1 and 2000", o.loadLocks)
	case o.loadDuration < 5*time.Second:
		return o, fmt.Errorf("-load-duration %v must be at least 5s", o.loadDuration)
	case o.probePeriod < 100*time.Millisecond || o.probeFailures < 1:
		return o, fmt.Errorf("-probe-period %v / -probe-failures %d: at least 100ms and 1", o.probePeriod, o.probeFailures)
	case o.reconciles < 0:
		return o, fmt.Errorf("-max-concurrent-reconciles %d is negative", o.reconciles)
	}
	if o.img == "" && o.out != "" {
		o.img = strings.TrimSuffix(o.out, "/"+lastElem(o.out)) + "/img"
		if !strings.Contains(o.out, "/") {
			o.img = "img"
		}
	}
	if only != "" {
		o.only = map[string]bool{}
		for _, n := range strings.Split(only, ",") {
			if !slices.Contains(sectionNames, n) {
				return o, fmt.Errorf("-only: unknown section %q (known: %s)", n, strings.Join(sectionNames, ","))
			}
			o.only[n] = true
		}
	}
	return o, nil
}

func lastElem(p string) string {
	if i := strings.LastIndex(p, "/"); i >= 0 {
		return p[i+1:]
	}
	return p
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	// client-go's elector and controller-runtime log through klog and logr: quiet here.
	klog.SetLogger(logr.Discard())
	ctrl.SetLogger(logr.Discard())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = run(ctx, o, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run runs the sections, prints the markdown and updates -out.
func run(ctx context.Context, o options, out, progress io.Writer) error {
	started := time.Now()
	rep := newReport(o)
	type step struct {
		name string
		run  func(context.Context, options, *report, io.Writer) error
	}
	steps := []step{
		{"handoff", runHandoffSection}, // sections 2 and 6
		{"crash", runCrashSection},
		{"load", runLoadSection},
		{"scale", runScaleSection},
	}
	var failed []string
	for _, st := range steps {
		if o.only != nil && !o.only[st.name] {
			continue
		}
		t := time.Now()
		fmt.Fprintf(progress, "== %s\n", st.name)
		if err := st.run(ctx, o, rep, progress); err != nil {
			if ctx.Err() != nil {
				return err
			}
			// A section that fails is reported as such; the others still run.
			fmt.Fprintf(progress, "%s: %v\n", st.name, err)
			rep.failed(st.name, err)
			failed = append(failed, st.name)
		}
		fmt.Fprintf(progress, "== %s done in %v\n", st.name, time.Since(t).Round(time.Second))
	}
	md := rep.markdown()
	if _, err := io.WriteString(out, md); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if o.out != "" {
		if err := rep.update(o.out); err != nil {
			return err
		}
		fmt.Fprintf(progress, "updated %s and %s\n", o.out, o.img)
	}
	fmt.Fprintf(progress, "done in %v\n", time.Since(started).Round(time.Second))
	if rep.summary != "" {
		fmt.Fprintln(out, rep.summary) // the last line of the output, for scripts
	}
	if len(failed) > 0 {
		return fmt.Errorf("sections failed: %s", strings.Join(failed, ", "))
	}
	return nil
}
