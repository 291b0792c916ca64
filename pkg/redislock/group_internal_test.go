package redislock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The group's wait returns at its ctx's end while a goroutine is counted,
// and nil once none is; add after the count reached zero is allowed.
func TestGroupWait(t *testing.T) {
	var g group
	if err := g.wait(context.Background()); err != nil {
		t.Fatalf("wait() on an empty group = %v, want nil", err)
	}
	release := make(chan struct{})
	g.goFunc(func() { <-release })
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := g.wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait() with a goroutine blocked = %v, want context.DeadlineExceeded", err)
	}
	close(release)
	long, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if err := g.wait(long); err != nil {
		t.Fatalf("wait() after the goroutine ended = %v, want nil", err)
	}
	// call: an answer when f returns, none when ctx ends first.
	answered, err := g.call(long, func() error { return errors.New("x") })
	if !answered || err == nil {
		t.Errorf("call(returning) = %v, %v; want true, x", answered, err)
	}
	block := make(chan struct{})
	short2, cancel3 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel3()
	if answered, _ := g.call(short2, func() error { <-block; return nil }); answered {
		t.Error("call(blocked) answered, want false at the ctx's end")
	}
	close(block)
	if err := g.wait(long); err != nil {
		t.Errorf("wait() after the blocked call ended = %v, want nil", err)
	}
}
