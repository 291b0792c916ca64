package redislock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestReplicated(t *testing.T) {
	denied := replyErr("NOPERM this user has no permissions to run the 'wait' command")
	tests := []struct {
		name    string
		want    int
		acked   int64
		waitErr error
		ok      bool
		reply   bool // the WAIT's error reply is wrapped
	}{
		{name: "no WAIT wanted", want: 0, ok: true},
		{name: "no WAIT wanted, error ignored", want: 0, waitErr: denied, ok: true},
		{name: "enough replicas", want: 2, acked: 2, ok: true},
		{name: "more than enough", want: 1, acked: 3, ok: true},
		{name: "too few replicas", want: 2, acked: 1},
		{name: "WAIT refused", want: 1, acked: 0, waitErr: denied, reply: true},
		{name: "WAIT reply lost", want: 1, acked: 0, waitErr: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := replicated(tt.want, tt.acked, tt.waitErr, time.Second)
			if tt.ok != (err == nil) || !tt.ok && !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("replicated(%d, %d, %v) = %v, want ok %v (else ErrNotReplicated)", tt.want, tt.acked, tt.waitErr, err, tt.ok)
			}
			var re redis.Error
			if tt.reply != errors.As(err, &re) {
				t.Errorf("replicated(%d, %d, %v) = %v: wraps the error reply %v, want %v", tt.want, tt.acked, tt.waitErr, err, !tt.reply, tt.reply)
			}
		})
	}
}
