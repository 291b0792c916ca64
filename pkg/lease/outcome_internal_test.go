package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Only a lost answer makes an outcome unknown; a refusal is returned as is.
func TestUnknownOutcome(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"context canceled", context.Canceled, true},
		{"deadline, wrapped", fmt.Errorf("txn: %w", context.DeadlineExceeded), true},
		{"no leader", rpctypes.ErrNoLeader, true},
		{"leader changed", rpctypes.ErrLeaderChanged, true},
		{"request timed out", rpctypes.ErrTimeout, true},
		{"timeout, connection lost", rpctypes.ErrTimeoutDueToConnectionLost, true},
		{"grpc unavailable", status.Error(codes.Unavailable, "connection refused"), true},
		{"grpc canceled, wrapped", fmt.Errorf("x: %w", status.Error(codes.Canceled, "grpc: the client connection is closing")), true},
		{"grpc internal", status.Error(codes.Internal, "stream terminated by RST_STREAM"), true},
		{"grpc deadline", status.Error(codes.DeadlineExceeded, "deadline"), true},
		{"in a join", errors.Join(errors.New("a"), rpctypes.ErrGRPCNoLeader), true},
		{"too many ops", rpctypes.ErrTooManyOps, false},
		{"too many ops, raw", rpctypes.ErrGRPCTooManyOps, false},
		{"request too large", rpctypes.ErrRequestTooLarge, false},
		{"permission denied", rpctypes.ErrPermissionDenied, false},
		{"no space", rpctypes.ErrNoSpace, false},
		{"too many requests", rpctypes.ErrTooManyRequests, false},
		{"too many requests, raw", rpctypes.ErrGRPCRequestTooManyRequests, false},
		{"too many requests, wrapped", fmt.Errorf("txn: %w", rpctypes.ErrTooManyRequests), false},
		{"not leader", rpctypes.ErrNotLeader, false},
		{"lease not found", rpctypes.ErrLeaseNotFound, false},
		{"grpc message too large", status.Error(codes.ResourceExhausted, "trying to send message larger than max"), false},
		{"grpc invalid argument", status.Error(codes.InvalidArgument, "bad"), false},
		{"plain error", errors.New("etcdclient: no available endpoints"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantOverloaded := strings.HasPrefix(tc.name, "too many requests")
			if got := overloaded(tc.err); got != wantOverloaded {
				t.Fatalf("overloaded(%v) = %v, want %v", tc.err, got, wantOverloaded)
			}
			if got := unknownOutcome(tc.err); got != tc.want {
				t.Fatalf("unknownOutcome(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if got := errors.Is(writeErr(tc.err), ErrUnknownOutcome); got != tc.want {
				t.Fatalf("writeErr(%v) wraps ErrUnknownOutcome = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
