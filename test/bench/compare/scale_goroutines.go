package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// goroutineDump is the manager's goroutines grouped by stack, as
// /debug/pprof/goroutine?debug=1 writes them.
func goroutineDump(ctx context.Context, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return "", fmt.Errorf("dump manager goroutines: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("dump manager goroutines: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("dump manager goroutines: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("dump manager goroutines: %s", resp.Status)
	}
	return string(data), nil
}

// saveDump writes a goroutine dump into the -logs directory as goroutines-<name>.txt; without
// -logs it does nothing.
func saveDump(name, dump string) error {
	if logDir == "" {
		return nil
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("save goroutine dump: %w", err)
	}
	if err := os.WriteFile(filepath.Join(logDir, "goroutines-"+name+".txt"), []byte(dump), 0o644); err != nil {
		return fmt.Errorf("save goroutine dump: %w", err)
	}
	return nil
}

// waitPkg's functions (wait.Group.Start, wait.UntilWithContext, ...) start goroutines for
// others: a goroutine is named after the first frame above them.
const waitPkg = "k8s.io/apimachinery/pkg/util/wait."

// goroutinesByStart counts a debug=1 goroutine dump's goroutines by the function each
// started in: the last frame of its stack that is not waitPkg's, shortened to its last path
// element ("events.(*eventBroadcasterImpl).startEventWatcher.func1"). A block without frames
// is counted under "?", so that the counts still add up to the dump's total.
func goroutinesByStart(dump string) map[string]int {
	out := map[string]int{}
	for _, block := range strings.Split(dump, "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if strings.HasPrefix(lines[0], "goroutine profile:") { // the dump's first line
			lines = lines[1:]
		}
		if len(lines) == 0 {
			continue
		}
		head, _, ok := strings.Cut(lines[0], " @ ")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(head)
		if err != nil {
			continue
		}
		var frames []string
		for _, l := range lines[1:] {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "#" && strings.HasPrefix(f[1], "0x") {
				frames = append(frames, f[2])
			}
		}
		start := "?"
		for i := len(frames) - 1; i >= 0; i-- {
			start = frames[i]
			if !strings.HasPrefix(start, waitPkg) {
				break
			}
		}
		if i := strings.LastIndex(start, "+0x"); i > 0 {
			start = start[:i]
		}
		start = start[strings.LastIndex(start, "/")+1:]
		out[start] += n
	}
	return out
}

// goroutinesAdded is "name +k" for every start function with more goroutines in after than
// in before (and "name -k" for fewer), largest change first, then by name.
func goroutinesAdded(before, after map[string]int) []string {
	type change struct {
		name string
		d    int
	}
	var cs []change
	for name, n := range after {
		if d := n - before[name]; d != 0 {
			cs = append(cs, change{name, d})
		}
	}
	for name, n := range before {
		if _, ok := after[name]; !ok {
			cs = append(cs, change{name, -n})
		}
	}
	slices.SortFunc(cs, func(a, b change) int {
		if c := max(b.d, -b.d) - max(a.d, -a.d); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = fmt.Sprintf("%s %+d", c.name, c.d)
	}
	return out
}
