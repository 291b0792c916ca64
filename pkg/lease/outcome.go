package lease

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// ErrUnknownOutcome marks a write whose answer was lost (Unavailable,
// deadline, cancellation, leader change): it may or may not have applied.
// Settle it by reading again (Engine.Inspect); never by assuming either way.
var ErrUnknownOutcome = errors.New("lease: outcome unknown")

// gRPC status codes (a wire protocol constant, google.golang.org/grpc/codes),
// spelled out because the import boundary keeps gRPC out of pkg/lease.
const (
	codeCanceled         = 1
	codeDeadlineExceeded = 4
	codeInternal         = 13
	codeUnavailable      = 14
)

// unknownOutcome reports whether err, returned by an etcd call, leaves the
// call's effect unknown: the request may have reached etcd and applied, but
// its answer was lost. That is the case for the context's errors, gRPC's
// Unavailable, DeadlineExceeded and Canceled (which include etcd's "no
// leader", "leader changed", "request timed out" and a lost connection), and
// Internal (gRPC's code for a stream broken in mid-flight, which etcd's own
// client retries as transient). Every other error is a definite refusal
// (too many operations, request too large, permission denied, no space, an
// invalid request, no endpoint to send to): etcd applied nothing, and
// retrying will not help.
func unknownOutcome(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	code, ok := grpcCode(err)
	if !ok {
		return false // not from gRPC: nothing was sent
	}
	switch code {
	case codeUnavailable, codeDeadlineExceeded, codeCanceled, codeInternal:
		return true
	}
	return false
}

// overloaded reports whether etcd turned the request away because it is
// behind on applying ("too many requests"): a refusal before anything was
// proposed, so nothing applied, but one that passes. Waiters retry it.
func overloaded(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyRequests) || errors.Is(err, rpctypes.ErrGRPCRequestTooManyRequests)
}

// grpcCode returns the gRPC status code err carries: an etcd server error
// (rpctypes.EtcdError), or a gRPC status error (anything in the chain with a
// GRPCStatus method, status.FromError's contract), found by reflection
// because gRPC may not be imported here.
func grpcCode(err error) (uint32, bool) {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return uint32(ee.Code()), true
	}
	for _, e := range chain(err) {
		m := reflect.ValueOf(e).MethodByName("GRPCStatus")
		if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
			continue
		}
		st := m.Call(nil)[0]
		if st.Kind() == reflect.Pointer && st.IsNil() {
			continue
		}
		c := st.MethodByName("Code")
		if !c.IsValid() || c.Type().NumIn() != 0 || c.Type().NumOut() != 1 || !c.Type().Out(0).ConvertibleTo(reflect.TypeFor[uint32]()) {
			continue
		}
		return uint32(c.Call(nil)[0].Uint()), true
	}
	return 0, false
}

// chain returns err and every error it wraps, depth first.
func chain(err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		out = append(out, e)
		switch u := e.(type) { //nolint:errorlint // this walks the wrap chain itself
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return out
}

// writeErr returns the error of a write that etcd did not answer: wrapped in
// ErrUnknownOutcome when its effect is unknown, as it is otherwise.
func writeErr(err error) error {
	if unknownOutcome(err) {
		return fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	return err
}
