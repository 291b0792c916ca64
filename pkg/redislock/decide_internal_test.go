package redislock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseValue(t *testing.T) {
	n := strings.Repeat("ab", 16)
	tests := []struct {
		in      string
		want    value
		wantErr bool
	}{
		{in: n + " 7 worker-1", want: value{nonce: n, token: 7, holder: "worker-1"}},
		{in: n + " 12 a holder with spaces", want: value{nonce: n, token: 12, holder: "a holder with spaces"}},
		{in: n + " 0 w", wantErr: true},
		{in: n + " -3 w", wantErr: true},
		{in: n + " x w", wantErr: true},
		{in: "short 1 w", wantErr: true},
		{in: n + " 1", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseValue(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseValue(%q) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseReply(t *testing.T) {
	tests := []struct {
		in      []any
		want    obstacle
		wantErr bool
	}{
		{in: []any{int64(1), "v", int64(1500)}, want: obstacle{state: stateGranted, text: "v", left: 1500 * time.Millisecond}},
		{in: []any{int64(0), "v", int64(-1)}, want: obstacle{state: stateHeld, text: "v"}},
		{in: []any{int64(2), "c/1", int64(20)}, want: obstacle{state: stateQueued, text: "c/1", left: 20 * time.Millisecond}},
		{in: []any{int64(3), "", int64(0)}, want: obstacle{state: stateEnded}},
		{in: []any{int64(4), "v", int64(1)}, wantErr: true},
		{in: []any{"1", "v", int64(1)}, wantErr: true},
		{in: []any{int64(1), "v"}, wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseReply(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseReply(%v) = %+v, %v; want %+v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestObstacleWait(t *testing.T) {
	const interval = time.Second
	tests := []struct {
		left, want time.Duration
	}{
		{left: 0, want: interval},                                    // no TTL known: the interval
		{left: 200 * time.Millisecond, want: 201 * time.Millisecond}, // just past the expiry
		{left: 5 * time.Second, want: interval},                      // never longer than the interval
	}
	for _, tt := range tests {
		if got := (obstacle{left: tt.left}).wait(interval); got != tt.want {
			t.Errorf("obstacle{left: %v}.wait(%v) = %v, want %v", tt.left, interval, got, tt.want)
		}
	}
}

func TestObstacleErr(t *testing.T) {
	n := strings.Repeat("0", 32)
	var he *HeldError
	err := obstacle{state: stateHeld, text: n + " 9 w1", left: time.Second}.err()
	if !errors.As(err, &he) || he.Holder != "w1" || he.Token != 9 || he.Left != time.Second || !errors.Is(err, ErrLocked) {
		t.Errorf("held err() = %v, want *HeldError{w1, 9, 1s} wrapping ErrLocked", err)
	}
	err = obstacle{state: stateQueued, text: "c/1"}.err()
	if errors.As(err, &he) || !errors.Is(err, ErrLocked) {
		t.Errorf("queued err() = %v, want ErrLocked, not a *HeldError", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for valid
	}{
		{name: "zero value", cfg: Config{}},
		{name: "short TTL", cfg: Config{TTL: 499 * time.Millisecond}, want: "below the minimum"},
		{name: "sub-millisecond TTL", cfg: Config{TTL: time.Second + time.Microsecond}, want: "whole number of milliseconds"},
		{name: "margin too large", cfg: Config{TTL: 4 * time.Second, Margin: 2 * time.Second}, want: "margin"},
		{name: "negative margin", cfg: Config{Margin: -time.Second}, want: "margin"},
		{name: "renew too rare", cfg: Config{TTL: 3 * time.Second, RenewInterval: 2 * time.Second}, want: "renew interval"},
		{name: "call timeout too long", cfg: Config{TTL: 3 * time.Second, CallTimeout: time.Second}, want: "call timeout"},
		{name: "brace in prefix", cfg: Config{Prefix: "a{b"}, want: "brace"},
		{name: "negative replicas", cfg: Config{WaitReplicas: -1}, want: "replicas"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalid)) {
				t.Errorf("Validate() = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	got := Config{TTL: 3 * time.Second}.withDefaults()
	want := Config{Prefix: "lockwarden", TTL: 3 * time.Second, Margin: 750 * time.Millisecond,
		RenewInterval: time.Second, CallTimeout: 750 * time.Millisecond, WaitTimeout: 750 * time.Millisecond}
	if got != want {
		t.Errorf("withDefaults() = %+v, want %+v", got, want)
	}
	if m := defaultMargin(15 * time.Second); m != 2*time.Second {
		t.Errorf("defaultMargin(15s) = %v, want 2s", m)
	}
}

func TestValidateKey(t *testing.T) {
	tests := []struct {
		key string
		ok  bool
	}{
		{"payments", true}, {"team/payments:eu", true},
		{"", false}, {"a{b", false}, {"a}b", false}, {"a\nb", false}, {string([]byte{0xff}), false},
		{strings.Repeat("k", 513), false},
	}
	for _, tt := range tests {
		if err := validateKey(tt.key); (err == nil) != tt.ok {
			t.Errorf("validateKey(%q) = %v, want ok %v", tt.key, err, tt.ok)
		}
	}
}

func TestAmbiguous(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"redis.Nil", redis.Nil, false},
		{"error reply", replyErr("NOSCRIPT No matching script"), false},
		{"wrapped error reply", fmt.Errorf("x: %w", replyErr("READONLY You can't write against a read only replica")), false},
		{"not replicated", fmt.Errorf("%w: 0 of 1", ErrNotReplicated), false},
		{"closed", ErrClosed, false},
		{"undone grant", &undoneError{err: errors.New("parse lock value")}, false},
		{"wrapped undone grant", fmt.Errorf("x: %w", &undoneError{err: context.DeadlineExceeded}), false},
		{"deadline", context.DeadlineExceeded, true},
		{"cancelled", context.Canceled, true},
		{"timeout", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, true},
		{"connection reset", io.ErrUnexpectedEOF, true},
		{"pool closed", redis.ErrClosed, true},
	}
	for _, tt := range tests {
		if got := ambiguous(tt.err); got != tt.want {
			t.Errorf("ambiguous(%s: %v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestRefused(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"redis.Nil", redis.Nil, false},
		{"readonly (Redis 7)", replyErr("READONLY You can't write against a read only replica. script: 0347, on @user_script:30."), true},
		{"readonly wrapped", fmt.Errorf("drop: %w", replyErr("READONLY You can't write against a read only replica.")), true},
		{"readonly in a script (Redis 6)", replyErr("ERR Error running script (call to f_0347): @user_script:30: -READONLY You can't write against a read only replica."), true},
		{"loading", replyErr("LOADING Redis is loading the dataset in memory"), true},
		{"busy", replyErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{"oom", replyErr("OOM command not allowed when used memory > 'maxmemory'."), true},
		{"masterdown", replyErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{"tryagain", replyErr("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"clusterdown", replyErr("CLUSTERDOWN The cluster is down"), true},
		{"noreplicas", replyErr("NOREPLICAS Not enough good replicas to write."), true},
		{"busykey is another code", replyErr("BUSYKEY Target key name already exists."), false},
		{"script error", replyErr("ERR user_script:1: Script attempted to access nonexistent global variable"), false},
		{"noscript", replyErr("NOSCRIPT No matching script"), false},
		{"noperm", replyErr("NOPERM this user has no permissions to run the 'eval' command"), false},
		{"undone grant wrapping a refusal", &undoneError{err: replyErr("READONLY You can't write")}, false},
		{"not replicated wrapping a refusal", fmt.Errorf("%w: wait: %w", ErrNotReplicated, replyErr("NOREPLICAS x")), false},
		{"deadline", context.DeadlineExceeded, false},
		{"a plain error with the code's text", errors.New("READONLY not from the server"), false},
	}
	for _, tt := range tests {
		if got := refused(tt.err); got != tt.want {
			t.Errorf("refused(%s: %v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}

// replyErr is an error reply from the server, as go-redis reports one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

var _ redis.Error = replyErr("")

func TestReleased(t *testing.T) {
	tests := []struct {
		n        int64
		maybeRan bool
		want     bool
	}{
		{releaseDeleted, false, true},
		{releaseDeleted, true, true},
		{releaseAbsent, false, false},
		{releaseAbsent, true, true},
		{releaseOthers, false, false},
		{releaseOthers, true, false},
		{releaseEarlier, false, false},
		{releaseEarlier, true, true},
		{releaseThisCall, false, true},
		{releaseThisCall, true, true},
	}
	for _, tt := range tests {
		if got := released(tt.n, tt.maybeRan); got != tt.want {
			t.Errorf("released(%d, %v) = %v, want %v", tt.n, tt.maybeRan, got, tt.want)
		}
	}
}
