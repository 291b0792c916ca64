package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// commit is a grant as lockwarden's etcd reported it: the lock key created, with the token
// (its CreateRevision) and the time the bench's etcd watch delivered it.
type commit struct {
	token int64
	at    time.Time
}

// watchGrants watches lockwarden's etcd for grants of the key and sends them to out until
// ctx ends; the returned channel closes when the goroutine has returned.
func watchGrants(ctx context.Context, cli *clientv3.Client, key string, out chan<- commit) <-chan struct{} {
	done := make(chan struct{})
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), key)
	go func() {
		defer close(done)
		for resp := range wch {
			at := time.Now()
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut && ev.Kv.CreateRevision == ev.Kv.ModRevision {
					select {
					case out <- commit{token: ev.Kv.CreateRevision, at: at}:
					default:
					}
				}
			}
		}
	}()
	return done
}

// collector waits for one lock's callbacks while keeping every observation and grant commit
// that arrives meanwhile.
type collector struct {
	rec      *recorder
	commits  chan commit
	seen     []event
	started  []event // OnStartedLeading calls that arrived while waiting for something else
	commitAt map[int64]time.Time
}

func newCollector(rec *recorder) *collector {
	return &collector{rec: rec, commits: make(chan commit, 1024), commitAt: map[int64]time.Time{}}
}

// reset forgets the observations collected so far (not the commits).
func (c *collector) reset() {
	c.seen, c.started = c.seen[:0], c.started[:0]
	for {
		select {
		case <-c.rec.started:
		case <-c.rec.seen:
		case m := <-c.commits:
			c.commitAt[m.token] = m.at
		default:
			return
		}
	}
}

// waitStarted waits for an OnStartedLeading that accept accepts.
func (c *collector) waitStarted(ctx context.Context, timeout time.Duration, accept func(event) bool) (event, error) {
	for i, e := range c.started {
		if accept(e) {
			c.started = append(c.started[:i], c.started[i+1:]...)
			return e, nil
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case e := <-c.rec.started:
			if accept(e) {
				return e, nil
			}
		case e := <-c.rec.seen:
			c.seen = append(c.seen, e)
		case m := <-c.commits:
			c.commitAt[m.token] = m.at
		case <-timer.C:
			return event{}, fmt.Errorf("no new leader within %v", timeout)
		case <-ctx.Done():
			return event{}, ctx.Err()
		}
	}
}

// waitSeen waits for an observation that accept accepts (among those already collected
// first).
func (c *collector) waitSeen(ctx context.Context, timeout time.Duration, accept func(event) bool) (event, error) {
	for _, e := range c.seen {
		if accept(e) {
			return e, nil
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case e := <-c.rec.seen:
			c.seen = append(c.seen, e)
			if accept(e) {
				return e, nil
			}
		case e := <-c.rec.started:
			c.started = append(c.started, e)
		case m := <-c.commits:
			c.commitAt[m.token] = m.at
		case <-timer.C:
			return event{}, fmt.Errorf("observation not seen within %v", timeout)
		case <-ctx.Done():
			return event{}, ctx.Err()
		}
	}
}

// waitCommit returns the commit time of token, waiting up to timeout for it.
func (c *collector) waitCommit(ctx context.Context, token int64, timeout time.Duration) (time.Time, bool) {
	if at, ok := c.commitAt[token]; ok {
		return at, true
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m := <-c.commits:
			c.commitAt[m.token] = m.at
			if m.token == token {
				return m.at, true
			}
		case e := <-c.rec.seen:
			c.seen = append(c.seen, e)
		case e := <-c.rec.started:
			c.started = append(c.started, e)
		case <-timer.C:
			return time.Time{}, false
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
}
