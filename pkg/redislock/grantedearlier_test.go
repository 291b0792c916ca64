package redislock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// With WaitReplicas, an acquire that finds its own grant by nonce (here
// the retry after a lost reply; also a waiter that finds the grant a
// release handed it) writes that grant again, PEXPIRE TTL, before its
// WAIT: the WAIT then counts a write of its own connection after the
// grant, and does not depend on how the server counts a WAIT after a read
// (Redis 7.0 waits for the whole replication offset; a server that counts
// only the connection's own writes would confirm at once). Seen here as
// the key's PTTL right after Acquire returns: a full TTL, not what was left
// of the first grant, 2 s after it (the step timeout) and more.
func TestWaitReplicasGrantedEarlierWritesBeforeWait(t *testing.T) {
	e := newEnv(t, redistest.Config{})
	replica := redistest.Start(t, redistest.Config{ReplicaOf: e.srv.Addr()})
	rr := replica.Client(t)
	eventually(t, 10*time.Second, "replica in sync", func() bool {
		info, _ := rr.Info(ctx(t), "replication").Result()
		return strings.Contains(info, "master_link_status:up")
	})
	p, viaProxy := e.proxied()
	cfg := redislock.Config{TTL: 6 * time.Second, WaitReplicas: 1, WaitTimeout: time.Second}
	ca := e.locks(viaProxy, cfg)
	warmUp(t, ca)

	r := acquireAfterLostReply(t, e, p, ca) // the first acquire grants; its reply is lost
	if r.err != nil {
		t.Fatalf("Acquire after a lost reply = %v, want the lock", r.err)
	}
	defer func() { _ = r.l.Release(ctx(t)) }()
	pttl := e.rdb.PTTL(ctx(t), lockKey("k")).Val()
	t.Logf("token %d, PTTL right after the retried Acquire returned: %v", r.l.Token(), pttl)
	if r.l.Token() != 1 {
		t.Errorf("token %d, want 1 (the grant recognised by its nonce)", r.l.Token())
	}
	if pttl < cfg.TTL-500*time.Millisecond {
		t.Errorf("PTTL after the retry found its grant = %v, want about the TTL %v: "+
			"the retry did not write the grant before its WAIT", pttl, cfg.TTL)
	}
	if v, _ := rr.Get(ctx(t), lockKey("k")).Result(); !strings.Contains(v, " a") {
		t.Errorf("replica's lock key = %q, want the grant", v)
	}
}
