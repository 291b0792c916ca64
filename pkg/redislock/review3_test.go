package redislock_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/internal/redistest"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// Review 3, suspicion A (safety with WaitReplicas). An Acquire whose first
// step granted but lost its reply retries with the same nonce; the script
// answers "granted earlier" (a read, no write) and the WAIT then runs on the
// retry's connection, which wrote nothing (or only older, already
// acknowledged writes): WAIT counts acks of that connection's last write, so
// it confirms at once although the replica never got the grant.
func TestReview3WaitAfterGrantedEarlierConfirmsUnreplicatedGrant(t *testing.T) {
	primary := redistest.Start(t, redistest.Config{})
	link := redistest.StartProxy(t, primary.Addr()) // replication link
	replica := redistest.Start(t, redistest.Config{ReplicaOf: link.Addr()})
	prdb := primary.Client(t)
	rrdb := replica.Client(t)
	eventually(t, 10*time.Second, "replica in sync", func() bool {
		_ = prdb.Set(context.Background(), "sync", "1", 0).Err()
		v, _ := rrdb.Get(context.Background(), "sync").Result()
		return v == "1"
	})

	pc := redistest.StartProxy(t, primary.Addr())
	viaProxy := redistest.ClientOf(t, pc.Addr())
	c, err := redislock.New(viaProxy, redislock.Config{TTL: 10 * time.Second, WaitReplicas: 1, WaitTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = c.Close(cctx)
	}()
	// Warm up: scripts loaded, wake channel subscribed, WAIT works.
	w, err := c.Acquire(ctx(t), "warm", "a")
	if err != nil {
		t.Fatalf("warm-up Acquire = %v", err)
	}
	_ = w.Release(ctx(t))
	time.Sleep(2 * time.Second) // the replica acks the warm-up's writes (REPLCONF ACK every 1 s)

	// Cut the replication link: the replica gets no more writes, acks nothing.
	link.BlackholeRx(true)
	link.BlackholeTx(true)
	fresh := redistest.ClientOf(t, primary.Addr())
	n, werr := fresh.Do(context.Background(), "WAIT", 1, 200).Int64()
	t.Logf("WAIT 1 200 on a fresh connection with the replica cut off = %d, %v", n, werr)
	_ = fresh.Eval(context.Background(), "return redis.call('GET', KEYS[1])", []string{"sync"}).Err()
	n, werr = fresh.Do(context.Background(), "WAIT", 1, 200).Int64()
	t.Logf("WAIT after a read-only script = %d, %v", n, werr)
	pc.BlackholeRx(true) // the first step's reply is lost; the script runs
	go func() {
		time.Sleep(300 * time.Millisecond)
		v, _ := prdb.Get(context.Background(), lockKey("k")).Result()
		t.Logf("at 300 ms the primary's key is %q", v)
		f2 := redistest.ClientOf(t, primary.Addr())
		n0, _ := f2.Do(context.Background(), "WAIT", 1, 100).Int64()
		_ = f2.Get(context.Background(), "sync").Err()
		n1, _ := f2.Do(context.Background(), "WAIT", 1, 100).Int64()
		t.Logf("probe after the unreplicated grant: fresh conn WAIT = %d; after a GET, WAIT = %d", n0, n1)
		pc.DropConnections() // the reply is lost with its connection; the retry dials anew
		pc.Heal()
	}()
	actx, cancel := context.WithTimeout(ctx(t), 8*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Acquire(actx, "k", "a")
	took := time.Since(start)
	rv, _ := rrdb.Get(context.Background(), lockKey("k")).Result()
	pv, _ := prdb.Get(context.Background(), lockKey("k")).Result()
	info, _ := prdb.Info(context.Background(), "replication").Result()
	t.Logf("primary replication: %s", strings.ReplaceAll(info, "\r\n", " "))
	t.Logf("Acquire = (%v, %v) after %v; primary key %q, replica key %q", l != nil, err, took, pv, rv)
	if err == nil && rv == "" {
		t.Errorf("Acquire with WaitReplicas 1 returned a Lock (token %d, Valid %v) whose grant the replica does not have: "+
			"the WAIT after the 'granted earlier' retry ran on a connection that wrote nothing; want ErrNotReplicated",
			l.Token(), l.Valid())
	}
}

// Review 3, suspicion B (honesty of New's check). A Ring with ReadTimeout 0
// (go-redis's default, which the shard clients turn into 5 s) passes New's
// WaitTimeout check (read 0 is taken as "no deadline"), so a WaitTimeout
// above 5 s is accepted and then cut by the pipeline's 5 s read.
func TestReview3RingDefaultReadTimeoutIsChecked(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"s": srv.Addr()}, MaxRetries: -1})
	t.Cleanup(func() { _ = r.Close() })
	c, err := redislock.New(r, redislock.Config{TTL: 30 * time.Second, WaitReplicas: 1}) // WaitTimeout 7.5 s
	if err != nil {
		t.Logf("New = %v (refused: check holds)", err)
		return
	}
	defer func() { _ = c.Close(context.Background()) }()
	start := time.Now()
	_, err = c.TryAcquire(ctx(t), "k", "a")
	took := time.Since(start)
	t.Logf("New accepted WaitTimeout 7.5 s on a Ring with default ReadTimeout; TryAcquire (no replica) = %v after %v", err, took)
	if !errors.Is(err, redislock.ErrNotReplicated) {
		t.Errorf("TryAcquire = %v, want ErrNotReplicated", err)
	}
	if err != nil && strings.Contains(err.Error(), "timeout") && took < 7*time.Second {
		t.Errorf("the WAIT was cut by the shard's 5 s read deadline (%v), not answered after WaitTimeout 7.5 s: New accepted a WaitTimeout it documents as refused", took)
	}
}

// Review 3, suspicion C (Cluster). The tombstone key is named from ARGV, not
// KEYS; on a cluster-enabled server a script may touch an undeclared key only
// in the slot of its declared ones. A one-node cluster runs TryAcquire, a
// held-lock Acquire that gives up (drop script with a waiter), Release, a
// second Release and TryAcquire after, through a ClusterClient.
func TestReview3ClusterScriptsWithTombstones(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server")
	}
	dir := t.TempDir()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--protected-mode", "no",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	direct := redistest.ClientOf(t, addr)
	eventually(t, 10*time.Second, "cluster node up", func() bool { return direct.Ping(context.Background()).Err() == nil })
	if err := direct.Do(context.Background(), "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("ADDSLOTSRANGE: %v", err)
	}
	eventually(t, 10*time.Second, "cluster ok", func() bool {
		s, _ := direct.ClusterInfo(context.Background()).Result()
		return strings.Contains(s, "cluster_state:ok")
	})
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1, ReadTimeout: time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	c, err := redislock.New(cc, redislock.Config{TTL: 4 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close(context.Background()) }()
	a, err := c.TryAcquire(ctx(t), "k", "a")
	if err != nil {
		t.Fatalf("TryAcquire on Cluster = %v", err)
	}
	actx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
	_, werr := c.Acquire(actx, "k", "w") // queues, then leaves (drop script with waiter)
	cancel()
	t.Logf("waiter Acquire on Cluster = %v", werr)
	if err := a.Release(ctx(t)); err != nil {
		t.Errorf("Release on Cluster = %v", err)
	}
	err2 := a.Release(ctx(t))
	t.Logf("second Release on Cluster = %v", err2)
	keys, _ := direct.Keys(context.Background(), "*").Result()
	t.Logf("keys after: %v", keys)
	b, err := c.TryAcquire(ctx(t), "k", "b")
	if err != nil {
		t.Errorf("TryAcquire after release on Cluster = %v", err)
	} else if b.Token() != 2 {
		t.Errorf("token = %d, want 2", b.Token())
	}
	for _, k := range keys {
		if strings.Contains(k, ":gone:") {
			if pttl, _ := direct.PTTL(context.Background(), k).Result(); pttl <= 0 || pttl > 6*time.Second {
				t.Errorf("tombstone %s PTTL %v, want (0, TTL + margin]", k, pttl)
			}
		}
	}
}
