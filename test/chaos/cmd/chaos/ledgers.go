package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// A run's fenced resource is one ledger process per slot of its lock (one for a one-slot
// lock and for an engine run): each slot has its own etcd key and tokens, so its writes are
// fenced by a ledger of its own, as a workload of N leaders over N shards would be. The
// workers get every ledger's URL (LEDGER_URLS, slot 0's first) and write each term to its
// slot's; the checkers read each ledger's decisions apart (chaos.CheckSlotLedgers).

// startLedgers starts the run's ledgers and waits until each serves.
func (r *run) startLedgers(ctx context.Context) error {
	n := r.sched.Slots()
	ports, err := testenv.FreePorts(n)
	if err != nil {
		return err
	}
	for i := range n {
		addr := "127.0.0.1:" + strconv.Itoa(ports[i])
		name := "ledger"
		if n > 1 {
			name = fmt.Sprintf("ledger-slot-%d", i)
		}
		p, err := startProc(r.dir, name, r.h.bins.ledger, nil, "ledger", "--listen", addr)
		if err != nil {
			return err
		}
		r.ledgers = append(r.ledgers, p) // stopped by teardown
		url := "http://" + addr
		r.ledgerURLs = append(r.ledgerURLs, url)
		if err := waitHTTP(ctx, url+"/outcomes", 10*time.Second); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	r.ledgerURL = r.ledgerURLs[0]
	return nil
}

// outcomesOf reads the decisions of slot i's ledger.
func (r *run) outcomesOf(ctx context.Context, i int) ([]chaos.Outcome, error) {
	var out []chaos.Outcome
	if err := getJSON(ctx, r.ledgerURLs[i]+"/outcomes", 5*time.Second, &out); err != nil {
		return nil, fmt.Errorf("read the outcomes of slot %d's ledger: %w", i, err)
	}
	return out, nil
}

// allOutcomes reads every ledger's decisions, slot by slot (none before the ledgers started).
func (r *run) allOutcomes(ctx context.Context) ([][]chaos.Outcome, error) {
	out := make([][]chaos.Outcome, len(r.ledgerURLs))
	for i := range out {
		var err error
		if out[i], err = r.outcomesOf(ctx, i); err != nil {
			return nil, err
		}
	}
	return out, nil
}
