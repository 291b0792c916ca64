// Command lease benchmarks lockwarden's lock engine (pkg/lease) side by side
// with etcd's own go.etcd.io/etcd/client/v3/concurrency.Mutex, on one
// embedded etcd member with fsync on, in this process, over loopback.
//
// Every contender has its own etcd client (as separate processes would) and
// its own session, for both engines. Loops hold the lock for 0 (release right
// after acquire returns). It measures, for each engine:
//
//   - uncontended acquire+release cycle latency (one contender, one key);
//   - cycles per second on one shared key with 8 and 32 contenders, with the
//     handoff latency (the releaser records the time just before Release or
//     Unlock, the next holder when its Acquire or Lock returns) and fairness
//     (fewest / most cycles completed by one contender, in the least fair
//     round);
//   - cycles per second on distinct keys (one per contender) at 1, 8 and 32;
//   - the one-write floor of a handoff: a bare loop of fsync'd etcd puts from
//     one client, each sent when the previous one returned, measured in the
//     same run (no lock can hand over faster than one durable write).
//
// Each measurement is split into rounds, the engines alternating which runs
// first, so that a noisy machine's drift in disk and CPU speed hits both
// alike. Usage:
//
//	go run ./test/bench/lease [-quick] [-duration 15s] [-cycles 1000] [-rounds 5] [-ttl 15s] [-only shared8,...] [-cpuprofile f]
//
// It prints the setup and markdown tables to stdout, progress to stderr, and
// ends with one line
//
//	summary: shared8_cycles_ratio=<ours/mutex> handoff_p99_ratio=<ours/mutex> fairness=<min/max>
//	  shared32_cycles_ratio=<ours/mutex> distinct1_ratio=<ours/mutex> distinct8_ratio=<ours/mutex>
//	  distinct32_ratio=<ours/mutex> floor_fraction32=<ours/floor>
//
// (one line), where fairness is lockwarden's on the shared key with 8
// contenders, the ratios are cycles/s (handoff_p99_ratio: the handoff's p99
// latency, 8 contenders), and floor_fraction32 is lockwarden's cycles/s on
// the shared key with 32 contenders over the floor's puts/s. It
// exits non-zero, with a message, on any error, including two contenders
// holding one key at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// options are the command-line flags.
type options struct {
	duration   time.Duration // each throughput measurement, per engine, over all rounds
	cycles     int           // uncontended cycles per engine, over all rounds
	rounds     int           // slices each measurement is split into, alternating engine order
	ttl        time.Duration // session TTL, both engines
	quick      bool
	only       map[string]bool // measurement names to run; empty: all
	cpuProfile string
}

func parseFlags(args []string) (options, error) {
	var o options
	var only string
	fs := flag.NewFlagSet("lease", flag.ContinueOnError)
	fs.DurationVar(&o.duration, "duration", 15*time.Second, "measured time of each throughput row (shared and distinct keys), per engine, summed over the rounds")
	fs.IntVar(&o.cycles, "cycles", 1000, "uncontended acquire+release cycles per engine, summed over the rounds (each round adds 10 warm-up cycles)")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds each measurement is split into; the engines alternate which runs first, so that drift in a noisy machine's disk and CPU hits both alike")
	fs.DurationVar(&o.ttl, "ttl", 15*time.Second, "session TTL for both engines (whole seconds, at least 2s)")
	fs.BoolVar(&o.quick, "quick", false, "short run for a smoke test: -duration 4s -cycles 100 -rounds 2 unless set explicitly")
	fs.StringVar(&only, "only", "", "comma-separated measurements to run (default all): "+strings.Join(measurementNames(), ","))
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run (client and etcd server) to this file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.quick {
		if !set["duration"] {
			o.duration = 4 * time.Second
		}
		if !set["cycles"] {
			o.cycles = 100
		}
		if !set["rounds"] {
			o.rounds = 2
		}
	}
	switch {
	case o.duration <= 0 || o.duration > 10*time.Minute:
		return o, fmt.Errorf("-duration %v must be above 0 and at most 10m", o.duration)
	case o.cycles < 1 || o.cycles > 100000:
		return o, fmt.Errorf("-cycles %d must be between 1 and 100000", o.cycles)
	case o.rounds < 1 || o.rounds > 100:
		return o, fmt.Errorf("-rounds %d must be between 1 and 100", o.rounds)
	case o.duration/time.Duration(o.rounds) < 500*time.Millisecond:
		return o, fmt.Errorf("-duration %v over -rounds %d leaves under 500ms per round", o.duration, o.rounds)
	case o.ttl < 2*time.Second || o.ttl%time.Second != 0:
		return o, fmt.Errorf("-ttl %v must be a whole number of seconds, at least 2s", o.ttl)
	}
	if only != "" {
		o.only = map[string]bool{}
		known := map[string]bool{}
		for _, n := range measurementNames() {
			known[n] = true
		}
		for _, n := range strings.Split(only, ",") {
			if !known[n] {
				return o, fmt.Errorf("-only: unknown measurement %q (known: %s)", n, strings.Join(measurementNames(), ","))
			}
			o.only[n] = true
		}
	}
	return o, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-lease:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = run(ctx, o, os.Stdout, os.Stderr)
	if ctx.Err() != nil {
		err = fmt.Errorf("interrupted: %w", err)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-lease:", err)
		os.Exit(1)
	}
}

// run starts etcd, runs every measurement for both engines, and prints the
// report to out and progress to progress.
func run(ctx context.Context, o options, out, progress io.Writer) (err error) {
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("cpu profile: %w", cerr)
			}
		}()
	}

	started := time.Now()
	fmt.Fprintln(progress, "starting embedded etcd (fsync on)...")
	b, err := newBench(ctx, o, maxContenders())
	if err != nil {
		return err
	}
	defer func() {
		if cerr := b.close(); cerr != nil && err == nil {
			err = cerr
		}
	}()

	rep := report{setup: describeSetup(o), loadBefore: machineLoad(), results: map[string]map[string]*result{}}
	for _, m := range measurements(o) {
		if o.only != nil && !o.only[m.name] {
			continue
		}
		acc := map[string]*result{}
		for round := range o.rounds {
			engines := b.engines(m.name)
			if round%2 == 1 {
				slices.Reverse(engines)
			}
			for _, eng := range engines {
				var r *result
				var err error
				// Labels let a -cpuprofile be split by engine and run
				// (pprof -tagfocus); goroutines etcd started earlier carry none.
				pprof.Do(ctx, pprof.Labels("engine", eng.name(), "run", m.name), func(ctx context.Context) {
					r, err = b.measure(ctx, eng, m, round)
				})
				if err != nil {
					return fmt.Errorf("%s, %s, round %d: %w", m.name, eng.name(), round+1, err)
				}
				if acc[eng.name()] == nil {
					acc[eng.name()] = r
				} else {
					acc[eng.name()].merge(r)
				}
			}
		}
		for _, eng := range b.engines(m.name) {
			fmt.Fprintf(progress, "%-11s %-10s %s\n", m.name, eng.name(), acc[eng.name()].brief())
		}
		rep.results[m.name] = acc
	}
	fmt.Fprintf(progress, "done in %v\n", time.Since(started).Round(time.Second))
	rep.setup = append(rep.setup, fmt.Sprintf("machine at start: %s; at end: %s (1-minute averages; other processes' load shows here)",
		rep.loadBefore, machineLoad()))
	return rep.write(out)
}
