package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestEmbeddedConfig(t *testing.T) {
	dir := t.TempDir()
	cfg, err := embeddedConfig(dir, "127.0.0.1:23790")
	if err != nil {
		t.Fatalf("embeddedConfig: %v", err)
	}
	if cfg.Dir != dir || cfg.WalDir != "" {
		t.Errorf("Dir = %q, WalDir = %q; want the data (WAL included) under %q, the volume", cfg.Dir, cfg.WalDir, dir)
	}
	if cfg.UnsafeNoFsync {
		t.Error("UnsafeNoFsync = true, want fsync on: a grant is acknowledged only once it is on disk")
	}
	retention, err := time.ParseDuration(cfg.AutoCompactionRetention)
	if cfg.AutoCompactionMode != "periodic" || err != nil || retention <= 0 {
		t.Errorf("auto compaction %q/%q, want periodic with a positive retention: without it the history grows until the NOSPACE alarm stops every write",
			cfg.AutoCompactionMode, cfg.AutoCompactionRetention)
	}
	for _, u := range append(append(cfg.ListenClientUrls, cfg.ListenPeerUrls...), append(cfg.AdvertiseClientUrls, cfg.AdvertisePeerUrls...)...) {
		if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
			t.Errorf("URL %s is not on loopback: the embedded etcd has no TLS", u.String())
		}
	}
	if got := cfg.ListenPeerUrls[0].Port(); got != "23791" {
		t.Errorf("peer port %s, want 23791 (the client port + 1)", got)
	}

	for _, listen := range []string{"127.0.0.1", "127.0.0.1:x", "127.0.0.1:65535", "127.0.0.1:0"} {
		if _, err := embeddedConfig(dir, listen); err == nil {
			t.Errorf("embeddedConfig(%q) = nil error, want one naming --embedded-etcd-listen", listen)
		}
	}
}

// TestEmbeddedEtcdSurvivesRestart is what a restart of the one manager pod does to the
// volume: a key on a lease, written before, is there after, with its lease alive.
func TestEmbeddedEtcdSurvivesRestart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "etcd") // the manifests use a subfolder of the volume
	listen := freePortPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	e, err := startEmbedded(dir, listen)
	if err != nil {
		t.Fatal(err)
	}
	cli := newClient(t, listen)
	grant, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("grant a lease: %v", err)
	}
	put, err := cli.Put(ctx, "/lockwarden/locks/shop/leader", "x", clientv3.WithLease(grant.ID))
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	_ = cli.Close()
	e.Close()
	for _, sub := range []string{"member/wal", "member/snap/db"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err != nil {
			t.Errorf("after a stop, %s: %v; want the data in the data dir", sub, err)
		}
	}

	e, err = startEmbedded(dir, listen)
	if err != nil {
		t.Fatalf("restart from the same data dir: %v", err)
	}
	defer e.Close()
	cli = newClient(t, listen)
	defer func() { _ = cli.Close() }()
	got, err := cli.Get(ctx, "/lockwarden/locks/shop/leader")
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if len(got.Kvs) != 1 || got.Kvs[0].CreateRevision != put.Header.Revision || got.Kvs[0].Lease != int64(grant.ID) {
		t.Fatalf("after restart the key is %v, want it with CreateRevision %d (the token) on lease %x", got.Kvs, put.Header.Revision, grant.ID)
	}
	ttl, err := cli.TimeToLive(ctx, grant.ID)
	if err != nil || ttl.TTL <= 0 {
		t.Errorf("lease %x after restart: TTL %v, %v; want it alive", grant.ID, ttl, err)
	}
}

func newClient(t *testing.T, listen string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + listen}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	return cli
}

// freePortPair returns a loopback host:port whose port and the next one were free.
func freePortPair(t *testing.T) string {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		next, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port+1))
		_ = l.Close()
		if err == nil {
			_ = next.Close()
			return "127.0.0.1:" + strconv.Itoa(port)
		}
	}
	t.Fatal("no two consecutive free ports on 127.0.0.1")
	return ""
}
