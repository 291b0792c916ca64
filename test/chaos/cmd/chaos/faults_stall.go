package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// The stall kinds (test/chaos/stall.go) through chaosworker's stall hook: arm it on the
// holder, so that its next write waits right after its Valid() check; end the holder's term
// while it waits; wait for the next holder's first accepted write; release the stalled write.
// The ledger must refuse it (CheckStalls fails a run in which no stalled write was refused).

// stallState is chaosworker's GET /stall answer.
type stallState struct {
	Armed   bool   `json:"armed"`
	Stalled bool   `json:"stalled"`
	Token   int64  `json:"token"`
	Result  string `json:"result"`
}

// stallHold arms w's stall hook and waits until one of its writes waits in it; it returns the
// token that write was checked with.
func stallHold(ctx context.Context, w *workerProc, limit time.Duration) (int64, error) {
	if err := stallPost(ctx, w, "/stall"); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if st, err := stallGet(ctx, w); err == nil && st.Stalled {
			return st.Token, nil
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	_ = stallPost(ctx, w, "/unstall") // disarm
	return 0, fmt.Errorf("no write of %s reached the stall hook within %v", w.p.name, limit)
}

// stallRelease lets w's stalled write go and returns its result.
func stallRelease(ctx context.Context, w *workerProc, limit time.Duration) string {
	if err := stallPost(ctx, w, "/unstall"); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if st, err := stallGet(ctx, w); err == nil && !st.Stalled && st.Result != "" {
			return st.Result
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return fmt.Sprintf("unknown (no result within %v)", limit)
}

func stallPost(ctx context.Context, w *workerProc, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+w.probe+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("stall hook of %s: %w", w.p.name, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("stall hook of %s: POST %s: %s", w.p.name, path, resp.Status)
	}
	return nil
}

func stallGet(ctx context.Context, w *workerProc) (stallState, error) {
	var st stallState
	err := getJSON(ctx, "http://"+w.probe+"/stall", 2*time.Second, &st)
	return st, err
}

// waitHigherWrite waits until the ledger (slot 0's) accepts a write with a token above
// token, and returns that token.
func (r *run) waitHigherWrite(ctx context.Context, token int64, limit time.Duration) (int64, error) {
	return r.waitHigherWriteAt(ctx, 0, token, limit)
}

// stallFault injects worker-stall-before-write and engine-stall-before-write.
func (r *run) stallFault(ctx context.Context, f chaos.Fault) (healFunc, error) {
	w, end, heal := r.stallTarget(ctx, f.Kind)
	if w == nil {
		r.notInjected = true // CheckStalls counts only stalls that reached a holder
		return nothing, nil
	}
	token, err := stallHold(ctx, w, 5*time.Second)
	if err != nil {
		r.note("%s: %v: not injected, not counted", f.Kind, err)
		r.notInjected = true
		return nothing, nil
	}
	r.note("%s: a write of %s with token %d waits after its Valid() check", f.Kind, w.p.name, token)
	end(token)
	next, err := r.waitHigherWrite(ctx, token, r.h.livenessBound())
	if err != nil {
		r.violate("liveness", "%s: the stalled holder's term (token %d) ended, but %v", f.Kind, token, err)
	}
	res := stallRelease(ctx, w, 5*time.Second)
	r.note("%s: next holder wrote with token %d; the stalled write with token %d was sent: %s", f.Kind, next, token, res)
	return func(context.Context) error { heal(); return nil }, nil
}

// stallTarget finds the holder whose next write the stall holds, waiting up to the liveness
// bound for one: a stall injected right after another fault (a force release, a crash) finds
// the lock between terms, and a stall that finds no holder exercises nothing (seed 21 run 4
// of a 60-minute run: "engine-stall-before-write: no holder", then CheckStalls failed the run
// for a stall that never happened). end ends the holder's term of a token while its write
// waits; heal undoes what end did. A nil worker: no holder within the bound.
func (r *run) stallTarget(ctx context.Context, kind string) (w *workerProc, end func(token int64), heal func()) {
	deadline := time.Now().Add(r.h.livenessBound())
	for {
		if kind == chaos.EngineStall {
			if holder, _ := r.engineHolder(ctx); holder != nil && holder.worker() != nil {
				return holder.worker(), func(token int64) { r.forceRelease(ctx, token) }, func() {}
			}
		} else if s := r.holderSlot(ctx); s != nil && s.worker() != nil {
			// Its readiness probe fails: the controller ends the term through Releasing and
			// the lock delay and grants another pod, while the stalled write waits.
			return s.worker(), func(int64) { s.setUnready(true) }, func() { s.setUnready(false) }
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			r.note("%s: no holder within %v: not injected, not counted", kind, r.h.livenessBound())
			return nil, nil, nil
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
}

// forceRelease ends the engine holder's term of token as an operator would
// (pkg/lease.ForceRelease).
func (r *run) forceRelease(ctx context.Context, token int64) {
	cli, err := r.h.etcd.client()
	if err != nil {
		r.note("force release: %v", err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	err = lease.NewEngine(cli, lease.WithPrefix(r.prefix)).ForceRelease(ctx, lockName, token)
	r.note("force-released token %d: %v", token, err)
}
