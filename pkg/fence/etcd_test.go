package fence_test

import (
	"errors"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

func TestCheck(t *testing.T) {
	_, eng, s := setup(t)
	l, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	if err := fence.Check(ctx(t), eng, "k", l.Token()); err != nil {
		t.Fatalf("Check(current token) = %v, want nil", err)
	}
	var se *fence.StaleError
	if err := fence.Check(ctx(t), eng, "k", l.Token()-1); !errors.As(err, &se) || se.Current != l.Token() {
		t.Fatalf("Check(older token) = %v, want a StaleError naming %d", err, l.Token())
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if err := fence.Check(ctx(t), eng, "k", l.Token()); !errors.As(err, &se) || se.Current != 0 || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Check after release = %v, want ErrStale naming 0", err)
	}
	if err := fence.Check(ctx(t), eng, "k", 0); !errors.Is(err, fence.ErrInvalid) {
		t.Fatalf("Check(token 0) = %v, want ErrInvalid", err)
	}
}

// Writes through Put and Txn land only while the lock is this grant's, in
// etcd's view, whatever the holder believes.
func TestPutAndTxn(t *testing.T) {
	cli, eng, s := setup(t)
	l, err := s.TryAcquire(ctx(t), "k", "h")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	res := "/t/" + t.Name() + "/resource"
	if _, err := fence.Put(ctx(t), l, res, "v1"); err != nil {
		t.Fatalf("Put while held = %v, want nil", err)
	}

	// The caller's own compare fails: an ordinary failed transaction, with
	// the caller's Else results only.
	resp, err := fence.Txn(ctx(t), l).
		If(clientv3.Compare(clientv3.Value(res), "=", "other")).
		Then(clientv3.OpPut(res, "v2")).
		Else(clientv3.OpGet(res)).
		Commit()
	if err != nil || resp.Succeeded || len(resp.Responses) != 1 {
		t.Fatalf("Txn with failing compare = %v (err %v), want not succeeded with 1 Else response", resp, err)
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "v1" {
		t.Fatalf("Else Get = %v, want v1", kvs)
	}

	// Someone else ends the grant; this process has not noticed yet.
	if err := eng.ForceRelease(ctx(t), "k", l.Token()); err != nil {
		t.Fatalf("ForceRelease = %v, want nil", err)
	}
	if _, err := fence.Put(ctx(t), l, res, "stale"); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Put after loss = %v, want ErrNotHeld", err)
	}
	if _, err := fence.Txn(ctx(t), l).Then(clientv3.OpDelete(res)).Commit(); !errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("Txn after loss = %v, want ErrNotHeld", err)
	}
	got, err := cli.Get(ctx(t), res)
	if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" {
		t.Fatalf("resource = %v (err %v), want v1 untouched", got.Kvs, err)
	}
}
