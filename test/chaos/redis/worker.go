package redischaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// Lock settings of every worker.
const (
	ttl        = time.Second
	margin     = 200 * time.Millisecond
	lockName   = "resource"
	holdWrites = 5                     // writes per grant
	writeEvery = 10 * time.Millisecond // between writes
)

// mono reads CLOCK_MONOTONIC: one clock for every process of the machine.
func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// monoOf projects a time.Time with a monotonic reading onto mono.
func monoOf(t time.Time) int64 { return mono() + int64(time.Until(t)) }

// sink receives a worker's grants and writes.
type sink interface {
	grant(g grant)
	write(holder string, token int64)
	ready()  // about to write: the instant a pause hurts most
	asking() // about to call Acquire: a pause then lands while it waits
}

// work contends for the lock until ctx ends: acquire, then up to holdWrites
// writes while Valid(), then release. A write is sent after its Valid()
// check; a pause between the two is what the fence is for.
func work(ctx context.Context, c *redislock.Client, name string, s sink) {
	workWith(ctx, c, name, s, func() time.Duration { return 0 })
}

// workWith is work whose every Acquire gives up after patience() (0: never),
// as a caller with a deadline does: its exit races the handoff that may be
// granting it the lock at that moment.
func workWith(ctx context.Context, c *redislock.Client, name string, s sink, patience func() time.Duration) {
	for ctx.Err() == nil {
		s.asking()
		actx, cancel := ctx, context.CancelFunc(func() {})
		if d := patience(); d > 0 {
			actx, cancel = context.WithTimeout(ctx, d)
		}
		l, err := c.Acquire(actx, lockName, name)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			continue // gave up waiting: ask again
		}
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(writeEvery) // Redis down: try again
			}
			continue
		}
		start := mono()
		for range holdWrites {
			if !l.Valid() {
				break
			}
			s.ready()
			s.write(name, l.Token())
			time.Sleep(writeEvery)
		}
		end := mono()
		if !l.Valid() {
			end = min(end, monoOf(l.ValidUntil()))
		}
		s.grant(grant{holder: name, token: l.Token(), start: start, end: end})
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = l.Release(rctx)
		cancel()
	}
}

// ledger is the fenced resource and the run's history.
type ledger struct {
	mu    sync.Mutex
	fence fence.Monotonic
	h     history
}

func (lg *ledger) grant(g grant) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	lg.h.grants = append(lg.h.grants, g)
}

// write admits a write under the same lock as recording it, as a resource
// must (Admit and the write atomic together).
func (lg *ledger) write(holder string, token int64) {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	err := lg.fence.Admit(holder, token)
	lg.h.writes = append(lg.h.writes, write{holder: holder, token: token, at: mono(), accepted: err == nil})
}

func (lg *ledger) ready()  {}
func (lg *ledger) asking() {}

func (lg *ledger) forget() {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	lg.h.forgets = append(lg.h.forgets, mono())
}

func (lg *ledger) history() history {
	lg.mu.Lock()
	defer lg.mu.Unlock()
	return history{grants: append([]grant(nil), lg.h.grants...), writes: append([]write(nil), lg.h.writes...),
		forgets: append([]int64(nil), lg.h.forgets...)}
}

// Child process: the test binary run with childEnv set to a redis address
// works through stdout: "G holder token start end", "W holder token", "R",
// "Q" (about to call Acquire).
const childEnv = "REDISCHAOS_CHILD"

type lineSink struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *lineSink) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.w, format+"\n", args...)
}

func (s *lineSink) grant(g grant) {
	s.printf("G %s %d %d %d", g.holder, g.token, g.start, g.end)
}
func (s *lineSink) write(holder string, token int64) { s.printf("W %s %d", holder, token) }

// ready announces the instant before a write and leaves the suite time to
// stop the process right there.
func (s *lineSink) ready() { s.printf("R"); time.Sleep(20 * time.Millisecond) }

// asking announces an Acquire.
func (s *lineSink) asking() { s.printf("Q") }

// child is the body of the child process; it works until stdin closes.
func child() int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(childEnv), MaxRetries: -1, ReadTimeout: 500 * time.Millisecond})
	defer rdb.Close()
	c, err := redislock.New(rdb, redislock.Config{TTL: ttl, Margin: margin})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	work(ctx, c, "child", &lineSink{w: os.Stdout})
	cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer ccancel()
	_ = c.Close(cctx)
	return 0
}

// readChild feeds a child's lines into lg, signalling each "R" on ready
// and each "Q" on asking.
func readChild(r io.Reader, lg *ledger, ready, asking chan<- struct{}) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 1 && (f[0] == "R" || f[0] == "Q"):
			ch := ready
			if f[0] == "Q" {
				ch = asking
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		case len(f) == 3 && f[0] == "W":
			t, err := strconv.ParseInt(f[2], 10, 64)
			if err != nil {
				return fmt.Errorf("child line %q: %w", sc.Text(), err)
			}
			lg.write(f[1], t)
		case len(f) == 5 && f[0] == "G":
			var n [3]int64
			for i := range n {
				v, err := strconv.ParseInt(f[2+i], 10, 64)
				if err != nil {
					return fmt.Errorf("child line %q: %w", sc.Text(), err)
				}
				n[i] = v
			}
			lg.grant(grant{holder: f[1], token: n[0], start: n[1], end: n[2]})
		default:
			return fmt.Errorf("child line %q: unknown", sc.Text())
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
