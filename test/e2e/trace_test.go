//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The handoff trace (issue 20 item 2): one planned handoff on the real node, step by step,
// each step stamped by the component that took it. Every component runs on this machine and
// reads the same kernel clock, so their wall-clock stamps are comparable (no decision reads
// them: this is a measurement). Sources:
//   - this process: kubectl delete sent and answered; the ledger's accept time (in-process);
//     the watch of the lock (the status write as this process received it);
//   - the kubelet's log (--v 2, klog): "Killing container with a grace period" for the pod;
//   - the workers' lines (examples/fenced-worker, trace.go: "<RFC 3339 nano> <pod>: <text>");
//   - the active manager's debug lines (config/e2e: --zap-log-level=debug, rfc3339nano): "turn",
//     "etcd term ended", "etcd grant committed", "status written".

// traceStep is one step of the handoff: what, where it was seen, and when.
type traceStep struct {
	What, Source string
	At           time.Time
}

// logTail follows one container's log from the API server until the container ends or stop.
type logTail struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	done  chan struct{}
	stopf context.CancelFunc
}

// followLogs streams pod's log (its first container) into memory from now on; the holder's
// log is gone once its pod is deleted, so it must be followed before the deletion.
func (c *cluster) followLogs(t testing.TB, ns, pod string) *logTail {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	lt := &logTail{done: make(chan struct{}), stopf: cancel}
	rc, err := c.n.kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		cancel()
		t.Fatalf("follow the log of %s/%s: %v", ns, pod, err)
	}
	go func() {
		defer close(lt.done)
		defer rc.Close()
		sc := bufio.NewScanner(rc)
		for sc.Scan() {
			lt.mu.Lock()
			lt.buf.WriteString(sc.Text() + "\n")
			lt.mu.Unlock()
		}
	}()
	t.Cleanup(lt.stop)
	return lt
}

// lines stops following and returns what was read.
func (lt *logTail) lines() []string {
	lt.stop()
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return strings.Split(strings.TrimSpace(lt.buf.String()), "\n")
}

func (lt *logTail) stop() {
	lt.stopf()
	<-lt.done
}

// podLog is the whole log of a running pod's first container.
func (c *cluster) podLog(t testing.TB, ns, pod string) []string {
	t.Helper()
	b, err := c.n.kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctxFor(t, 30*time.Second))
	if err != nil {
		t.Errorf("log of %s/%s: %v", ns, pod, err)
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// workerLine parses a fenced-worker line: its time and its text after "<pod>: ".
func workerLine(line string) (time.Time, string, bool) {
	stamp, rest, ok := strings.Cut(line, " ")
	if !ok {
		return time.Time{}, "", false
	}
	at, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return time.Time{}, "", false
	}
	_, text, ok := strings.Cut(rest, ": ")
	return at, text, ok
}

// firstWorker is the time of the first worker line after from that contains every one of
// parts, or zero.
func firstWorker(lines []string, from time.Time, parts ...string) time.Time {
	for _, l := range lines {
		at, text, ok := workerLine(l)
		if !ok || at.Before(from) {
			continue
		}
		if containsAll(text, parts...) {
			return at
		}
	}
	return time.Time{}
}

// managerEntry is one of the manager's JSON log lines.
type managerEntry struct {
	At    time.Time
	Msg   string
	Lock  string
	Token int64
	Phase string
}

// managerLines parses the manager's JSON lines (zap, rfc3339nano times); others are skipped.
func managerLines(lines []string) []managerEntry {
	var out []managerEntry
	for _, l := range lines {
		var e struct {
			TS    string `json:"ts"`
			Msg   string `json:"msg"`
			Lock  string `json:"lock"`
			Token int64  `json:"token"`
			Phase string `json:"phase"`
		}
		if json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, e.TS)
		if err != nil {
			continue
		}
		out = append(out, managerEntry{At: at, Msg: e.Msg, Lock: e.Lock, Token: e.Token, Phase: e.Phase})
	}
	return out
}

// firstManager is the first entry after from for lock with msg that matches ok.
func firstManager(es []managerEntry, from time.Time, lock, msg string, ok func(managerEntry) bool) time.Time {
	for _, e := range es {
		if e.At.Before(from) || e.Lock != lock || e.Msg != msg || (ok != nil && !ok(e)) {
			continue
		}
		return e.At
	}
	return time.Time{}
}

// lastBefore is the time of the last entry for lock with msg at or before at (zero when at is
// zero or there is none): the start of the turn that did what happened at at.
func lastBefore(es []managerEntry, at time.Time, lock, msg string) time.Time {
	var found time.Time
	for _, e := range es {
		if !at.IsZero() && !e.At.After(at) && e.Lock == lock && e.Msg == msg {
			found = e.At
		}
	}
	return found
}

// klogLine matches a klog header: severity, MMDD, time with microseconds.
var klogLine = regexp.MustCompile(`^[IWEF](\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d{6})`)

// kubeletKill is the time of the kubelet's first "Killing container with a grace period" line
// for pod after from (klog stamps local time without a year; the node runs in UTC like this
// process's machine, and the year is from's).
func (c *cluster) kubeletKill(t testing.TB, pod string, from time.Time) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.n.dir, "logs", "kubelet.log"))
	if err != nil {
		t.Errorf("read the kubelet's log: %v", err)
		return time.Time{}
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if !strings.Contains(l, "Killing container with a grace period") || !strings.Contains(l, "/"+pod+`"`) {
			continue
		}
		m := klogLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s%s %s", from.Year(), m[1], m[2], m[3]), time.Local)
		if err == nil && !at.Before(from.Add(-time.Second)) {
			return at
		}
	}
	return time.Time{}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// formatTrace prints the steps in order of time, each with its offset from t0 and from the
// step before; a step not recorded says so.
func formatTrace(steps []traceStep, t0 time.Time) string {
	var b strings.Builder
	var prev time.Time
	for _, s := range steps {
		if s.At.IsZero() {
			fmt.Fprintf(&b, "  %-9s %-8s %-58s (%s)\n", "-", "", s.What, s.Source+": not recorded")
			continue
		}
		delta := ""
		if !prev.IsZero() {
			delta = "+" + ms(s.At.Sub(prev))
		}
		fmt.Fprintf(&b, "  %9s %-8s %-58s (%s)\n", ms(s.At.Sub(t0)), delta, s.What, s.Source)
		prev = s.At
	}
	return b.String()
}
