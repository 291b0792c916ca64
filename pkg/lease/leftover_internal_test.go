package lease

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A leftover is deleted only while the key is still what was left: on the
// session's lease, and by value, by grant, or by age, as it was left.
func TestLeftoverOurs(t *testing.T) {
	const id = 7
	kv := func(lease, create int64, v string) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Lease: lease, CreateRevision: create, Value: []byte(v)}
	}
	for _, tc := range []struct {
		name string
		lo   leftover
		kv   *mvccpb.KeyValue
		want bool
	}{
		{"value: same", leftover{value: "x"}, kv(id, 5, "x"), true},
		{"value: changed", leftover{value: "x"}, kv(id, 5, "y"), false},
		{"value: other lease", leftover{value: "x"}, kv(8, 5, "x"), false},
		{"token: same grant, new value", leftover{value: "x", token: 5}, kv(id, 5, "y"), true},
		{"token: newer grant, same value", leftover{value: "x", token: 5}, kv(id, 9, "x"), false},
		{"token: other lease", leftover{token: 5}, kv(8, 5, ""), false},
		{"upTo: older entry", leftover{upTo: 10}, kv(id, 10, "any"), true},
		{"upTo: newer entry", leftover{upTo: 10}, kv(id, 11, "any"), false},
		{"upTo: other lease", leftover{upTo: 10}, kv(8, 3, "any"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.lo.ours(tc.kv, id); got != tc.want {
				t.Fatalf("ours(%+v) = %v, want %v", tc.kv, got, tc.want)
			}
		})
	}
}

// Leftovers that share an etcd key (a semaphore's queue entry is one per
// lease) are each kept until settled: a second call's never replaces the
// first's (review 22), and settling one forgets only that one.
func TestLeftoversShareKey(t *testing.T) {
	s := &Session{leftovers: make(map[string][]leftover), cleanc: make(chan struct{}, 1)}
	first := leftover{key: "m", path: "/p/semaphores/sem/1", value: "first"}
	second := leftover{key: "m", path: first.path, value: "second"}
	s.handOver(first)
	s.handOver(second, first)
	if got := s.leftovers[first.path]; len(got) != 2 || got[0] != first || got[1] != second {
		t.Fatalf("leftovers at %s after handing over first, second, first = %+v, want [first second]", first.path, got)
	}
	s.forgetLeftover(first)
	if got := s.leftovers[first.path]; len(got) != 1 || got[0] != second || !s.leftoverAt(first.path) {
		t.Fatalf("leftovers at %s after settling first = %+v, want [second]", first.path, got)
	}
	s.forgetLeftover(second)
	if _, ok := s.leftovers[first.path]; ok || s.leftoverAt(first.path) {
		t.Fatalf("leftovers at %s after settling both = %+v, want none", first.path, s.leftovers[first.path])
	}
}
