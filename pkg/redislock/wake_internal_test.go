package redislock

import (
	"fmt"
	"io"
	"net"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestHealth(t *testing.T) {
	timeout := &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}
	tests := []struct {
		name   string
		err    error
		pinged bool
		want   int
	}{
		{"a message", nil, false, healthMessage},
		{"a message after a Ping (the Pong)", nil, true, healthMessage},
		{"closed", redis.ErrClosed, false, healthClosed},
		{"closed after a Ping", fmt.Errorf("receive: %w", redis.ErrClosed), true, healthClosed},
		{"silent", timeout, false, healthPing},
		{"silent after a Ping", timeout, true, healthDead},
		{"broken connection", io.EOF, false, healthFailed},
		{"broken connection after a Ping", io.ErrUnexpectedEOF, true, healthFailed},
	}
	for _, tt := range tests {
		if got := health(tt.err, tt.pinged); got != tt.want {
			t.Errorf("health(%s: %v, pinged %v) = %d, want %d", tt.name, tt.err, tt.pinged, got, tt.want)
		}
	}
}
