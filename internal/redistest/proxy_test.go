package redistest

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestProxyFaults(t *testing.T) {
	srv := Start(t, Config{})
	p := StartProxy(t, srv.Addr())
	cli := ClientOf(t, p.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cli.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the proxy: %v", err)
	}

	// Delay with jitter: a round trip takes at least the delay; order holds.
	p.DelayTx(150*time.Millisecond, 50*time.Millisecond)
	start := time.Now()
	pipe := cli.Pipeline()
	incrs := make([]int64, 0, 20)
	cmds := make([]interface{ Val() int64 }, 0, 20)
	for range 20 {
		cmds = append(cmds, pipe.Incr(ctx, "n"))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatalf("pipeline through a delayed proxy: %v", err)
	}
	for _, c := range cmds {
		incrs = append(incrs, c.Val())
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("delayed round trip took %v, want at least 150ms", d)
	}
	for i, n := range incrs {
		if n != int64(i+1) {
			t.Fatalf("INCR results %v, want 1..20 in order", incrs)
		}
	}
	p.Heal()

	// Blackhole Rx: the command runs, its reply is lost.
	p.BlackholeRx(true)
	if err := cli.Set(ctx, "lost", "ran", 0).Err(); err == nil {
		t.Error("SET with replies blackholed = nil, want a timeout")
	}
	direct := srv.Client(t)
	if v, _ := direct.Get(ctx, "lost").Result(); v != "ran" {
		t.Errorf("key written behind a blackholed reply = %q, want ran", v)
	}
	if p.Pending() != 0 {
		t.Errorf("Pending() = %d with nothing delayed, want 0", p.Pending())
	}
	p.Heal()

	// Drop: open connections close; a new one works.
	p.DropConnections()
	var err error
	for range 3 { // the pooled connection that was dropped fails once
		if err = cli.Ping(ctx).Err(); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("PING after DropConnections = %v, want a fresh connection to work", err)
	}

	// Kill and restart on the same port.
	srv.Kill()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, _ := direct.Get(ctx, "k").Result(); v != "" {
		t.Errorf("after a restart without persistence GET k = %q, want empty", v)
	}
}
