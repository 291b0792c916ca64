package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
)

// The slot demo: the lock ingest-shards of config/samples has spec.slots 3 over the five pods
// ingest-0 to ingest-4. Each pod runs a fenced-worker with --shard-per-slot: holding slot i,
// it writes to shard i of a sharded ledger under slot i's token (the sharding pattern of
// docs/slots.md), and shard i refuses a token below the highest it has accepted.
const (
	slotLock   = "ingest-shards" // from config/samples
	slotCount  = 3               // its spec.slots
	slotApp    = "ingest"
	slotPodsOf = 5
)

// slotPods are the candidate pods of slotLock, oldest first.
func slotPods() []string {
	names := make([]string, slotPodsOf)
	for i := range names {
		names[i] = slotApp + "-" + strconv.Itoa(i)
	}
	return names
}

// startSlotWorkers starts the sharded ledger (one shard per slot) and a fenced-worker for
// each ingest pod.
func (p *playground) startSlotWorkers(ctx context.Context) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	p.shardLedgerAt = "http://127.0.0.1:" + strconv.Itoa(port)
	bin := func(name string) string { return filepath.Join(p.root, "bin", name) }
	if p.shardLedger, err = start(p.dir, "shard-ledger", bin("fenced-worker"), nil,
		"ledger", "--listen", "127.0.0.1:"+strconv.Itoa(port), "--shards", strconv.Itoa(slotCount)); err != nil {
		return err
	}
	for _, name := range slotPods() {
		pod := p.pods[name]
		kubeconfig, err := p.podKubeconfig(ctx, pod)
		if err != nil {
			return err
		}
		w, err := start(p.dir, "worker-"+name, bin("fenced-worker"), []string{
			"KUBECONFIG=" + kubeconfig, "POD_NAME=" + name, "POD_UID=" + string(pod.UID),
			"LOCK_NAMESPACE=" + ns, "LOCK_NAME=" + slotLock, "LEDGER_URL=" + p.shardLedgerAt,
		}, "--probe-address", "0", "--shard-per-slot")
		if err != nil {
			return err
		}
		p.workers[name] = w
	}
	return nil
}

// slotTerm is one slot's term as the demo follows it.
type slotTerm struct {
	holder, uid string
	token       int64
}

// slotTerms returns the terms of slots 0 to n-1 of l, and whether every one is Held.
func slotTerms(l *lockv1.DistributedLock, n int) ([]slotTerm, bool) {
	ts := make([]slotTerm, n)
	held := true
	for i := range ts {
		v := l.Status.SlotView(int32(i))
		ts[i] = slotTerm{holder: v.Holder, uid: string(v.HolderUID), token: v.FencingToken}
		held = held && v.Phase == lockv1.PhaseHeld
	}
	return ts, held
}

// slotDemo shows the slots held, deletes the holders of slots 0 and 2 at once, shows those
// slots move to the waiting pods while slot 1 keeps its holder and token, and shows shard 2
// refusing a write with its ex-holder's token.
func (p *playground) slotDemo(ctx context.Context) error {
	p.say("%s: %d slots over %d pods (%s-0 to %s-%d); the holder of slot i writes to shard i of its ledger under slot i's token ...",
		slotLock, slotCount, slotPodsOf, slotApp, slotApp, slotPodsOf-1)
	l, err := waitLock(ctx, p.k8s, ns, slotLock, 60*time.Second, "all slots held", func(l *lockv1.DistributedLock) bool {
		_, held := slotTerms(l, slotCount)
		return held
	})
	if err != nil {
		return err
	}
	before, _ := slotTerms(l, slotCount)
	for i, t := range before {
		if err := p.waitShardWrites(ctx, i, t); err != nil {
			return err
		}
	}
	if err := p.kubectl(ctx, "kubectl", "get", "dlock", slotLock); err != nil {
		return err
	}
	if err := p.kubectl(ctx, "kubectl-dlock", "get", slotLock); err != nil {
		return err
	}

	moved := []int{0, 2}
	for _, i := range moved {
		if p.workers[before[i].holder] == nil {
			return fmt.Errorf("slot %d's holder %s is not one of the playground's workers", i, before[i].holder)
		}
	}
	p.say("deleting pods %s (slot 0) and %s (slot 2) at once, as a rollout would; slot 1 keeps %s ...", before[0].holder, before[2].holder, before[1].holder)
	deleted := time.Now()
	for _, i := range moved {
		if err := p.kubelet.Delete(ctx, p.pods[before[i].holder]); err != nil {
			return err
		}
	}
	l, err = waitLock(ctx, p.k8s, ns, slotLock, 60*time.Second, "slots 0 and 2 held by other pods", func(l *lockv1.DistributedLock) bool {
		ts, held := slotTerms(l, slotCount)
		return held && ts[0].uid != before[0].uid && ts[0].token > before[0].token &&
			ts[2].uid != before[2].uid && ts[2].token > before[2].token
	})
	if err != nil {
		return err
	}
	after, _ := slotTerms(l, slotCount)
	p.say("slots 0 and 2 held again %v after the deletions (polled every 50 ms)", time.Since(deleted).Round(time.Millisecond))
	if after[1] != before[1] {
		return fmt.Errorf("slot 1 moved from %s token %d to %s token %d, want it kept: its holder was not deleted", before[1].holder, before[1].token, after[1].holder, after[1].token)
	}
	for _, i := range moved {
		v := l.Status.SlotView(int32(i))
		p.say("slot %d: %s's term (token %d) ended: %s; %s holds it with token %d", i, before[i].holder, before[i].token, endReason(&lockv1.DistributedLock{Status: v}, before[i].token), after[i].holder, after[i].token)
		if _, err := p.dels.waitFinished(ctx, before[i].holder, 30*time.Second); err != nil {
			return err
		}
	}
	for _, i := range moved {
		if err := p.waitShardWrites(ctx, i, after[i]); err != nil {
			return err
		}
	}
	if err := p.kubectl(ctx, "kubectl-dlock", "get", slotLock); err != nil {
		return err
	}

	const stale = 2
	old := before[stale]
	p.say("sending a write to shard %d with %s's old token %d, as a paused ex-holder of slot %d waking up would ...", stale, old.holder, old.token, stale)
	c := (&ledger.Client{URL: p.shardLedgerAt, HTTP: &http.Client{Timeout: 5 * time.Second}, Name: old.holder}).Shard(stale)
	err = c.Append(ctx, old.uid, old.token, "late write from "+old.holder)
	switch {
	case err == nil:
		return fmt.Errorf("stale write to shard %d with token %d was accepted, want shard %d to refuse it", stale, old.token, stale)
	case !errors.Is(err, ledger.ErrStale):
		return fmt.Errorf("stale write to shard %d with token %d: %w (want shard %d to refuse it as stale)", stale, old.token, err, stale)
	}
	p.say("shard %d answered: %v", stale, err)
	for i := range after {
		if after[i] == before[i] {
			p.say("slot %d: %s token %d (kept)", i, before[i].holder, before[i].token)
		} else {
			p.say("slot %d: %s token %d -> %s token %d", i, before[i].holder, before[i].token, after[i].holder, after[i].token)
		}
	}
	p.say("shard %d rejected token %d from %s", stale, old.token, old.holder)
	return nil
}

// waitShardWrites waits until shard i of the sharded ledger holds an entry written by t's
// holder with t's token, and says so.
func (p *playground) waitShardWrites(ctx context.Context, i int, t slotTerm) error {
	if err := waitEntries(ctx, ledger.ShardURL(p.shardLedgerAt, i), t.uid, t.token, 1); err != nil {
		return fmt.Errorf("%s holds slot %d of %s with token %d: %w (see %s/worker-%s.log)", t.holder, i, slotLock, t.token, err, p.dir, t.holder)
	}
	p.say("%s holds slot %d with token %d and has written to shard %d", t.holder, i, t.token, i)
	return nil
}

// kubectl runs ./bin/<bin> with args against the playground and prints the command and its
// output, as a terminal would.
func (p *playground) kubectl(ctx context.Context, bin string, args ...string) error {
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(p.root, "bin", bin), append([]string{"--kubeconfig", p.kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	shown := strings.Replace(bin, "kubectl-", "kubectl ", 1) + " " + strings.Join(args, " ")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", shown, err, strings.TrimSpace(stderr.String()))
	}
	p.say("$ %s\n%s", shown, strings.TrimRight(out.String(), "\n"))
	return nil
}
