package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// cpuProfiles is a pair of CPU profiles taken over the same window.
type cpuProfiles struct {
	window               time.Duration
	apiserver, manager   string // files; "" when that capture failed
	apiserverTop, mgrTop string // `go tool pprof -top` excerpts
	err                  error
}

// captureCPU takes CPU profiles of kube-apiserver and the manager over the same window,
// and writes them into dir as <name>-apiserver.pprof and <name>-manager.pprof.
func captureCPU(ctx context.Context, s *stack, dir, name string, window time.Duration) *cpuProfiles {
	p := &cpuProfiles{window: window}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.err = err
		return p
	}
	secs := fmt.Sprint(int(window / time.Second))
	var wg sync.WaitGroup
	var apiErr, mgrErr error
	wg.Go(func() {
		data, err := s.bulk.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", secs).DoRaw(ctx)
		if err == nil {
			file := filepath.Join(dir, name+"-apiserver.pprof")
			if err = os.WriteFile(file, data, 0o644); err == nil {
				p.apiserver = file
			}
		}
		apiErr = err
	})
	wg.Go(func() {
		mgrErr = func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.mgr.pprofAddr+"/debug/pprof/profile?seconds="+secs, nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("manager pprof: %s", resp.Status)
			}
			data, err := io.ReadAll(resp.Body)
			if err != nil {
				return err
			}
			file := filepath.Join(dir, name+"-manager.pprof")
			if err := os.WriteFile(file, data, 0o644); err != nil {
				return err
			}
			p.manager = file
			return nil
		}()
	})
	wg.Wait()
	if apiErr != nil {
		p.err = fmt.Errorf("kube-apiserver: %w", apiErr)
	}
	if mgrErr != nil {
		p.err = errors.Join(p.err, fmt.Errorf("manager: %w", mgrErr))
	}
	return p
}

// summarise fills in the `go tool pprof -top` excerpts; it runs after the measurement, so
// that pprof's own CPU does not slow what is being measured.
func (p *cpuProfiles) summarise() {
	p.apiserverTop, p.mgrTop = pprofTop(p.apiserver), pprofTop(p.manager)
}

// pprofTop is the head of `go tool pprof -top -cum` for file: where the CPU time went,
// callers included.
func pprofTop(file string) string {
	if file == "" {
		return ""
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=25", file).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("go tool pprof: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var keep []string
	for _, l := range lines {
		if strings.HasPrefix(l, "File:") || strings.HasPrefix(l, "Build ID:") || strings.HasPrefix(l, "Type:") || strings.HasPrefix(l, "Time:") {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}
