package fence_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/lockwarden/lockwarden/pkg/fence"
)

func TestMonotonic(t *testing.T) {
	type admit struct {
		writer string
		token  int64
		want   error // nil, fence.ErrStale or fence.ErrInvalid
	}
	cases := []struct {
		name  string
		steps []admit
	}{
		{"increasing tokens", []admit{{"a", 5, nil}, {"b", 7, nil}, {"a", 9, nil}}},
		{"lower token refused", []admit{{"a", 7, nil}, {"b", 5, fence.ErrStale}, {"a", 6, fence.ErrStale}}},
		{"same token, same writer", []admit{{"a", 7, nil}, {"a", 7, nil}, {"a", 7, nil}}},
		{"same token, another writer", []admit{{"a", 7, nil}, {"b", 7, fence.ErrStale}, {"a", 7, nil}}},
		{"the fence moves on", []admit{{"a", 7, nil}, {"b", 8, nil}, {"a", 7, fence.ErrStale}, {"a", 8, fence.ErrStale}}},
		{"bad input", []admit{{"", 7, fence.ErrInvalid}, {"a", 0, fence.ErrInvalid}, {"a", -3, fence.ErrInvalid}, {"a", 1, nil}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var m fence.Monotonic
			for i, st := range tc.steps {
				err := m.Admit(st.writer, st.token)
				if (st.want == nil) != (err == nil) || (st.want != nil && !errors.Is(err, st.want)) {
					t.Fatalf("step %d: Admit(%q, %d) = %v, want %v", i, st.writer, st.token, err, st.want)
				}
			}
		})
	}
}

func TestMonotonicStaleErrorNamesCurrent(t *testing.T) {
	var m fence.Monotonic
	if err := m.Admit("a", 9); err != nil {
		t.Fatalf("Admit = %v, want nil", err)
	}
	var se *fence.StaleError
	if err := m.Admit("b", 4); !errors.As(err, &se) || se.Current != 9 || se.Token != 4 {
		t.Fatalf("Admit(b, 4) = %v, want a StaleError with token 4, current 9", err)
	}
	if tok, w := m.Highest(); tok != 9 || w != "a" {
		t.Fatalf("Highest() = %d, %q, want 9, a", tok, w)
	}
}

// Many writers at once: exactly one writer wins a contested token, and the
// fence ends at the highest token presented.
func TestMonotonicConcurrent(t *testing.T) {
	var m fence.Monotonic
	const writers = 16
	var wg sync.WaitGroup
	won := make([]bool, writers)
	for w := range writers {
		wg.Go(func() {
			id := fmt.Sprintf("w%d", w)
			for tok := int64(1); tok <= 200; tok++ {
				_ = m.Admit(id, tok)
			}
			won[w] = m.Admit(id, 1000) == nil
		})
	}
	wg.Wait()
	winners := 0
	for _, ok := range won {
		if ok {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("writers admitted with the contested token 1000 = %d, want 1", winners)
	}
	if tok, _ := m.Highest(); tok != 1000 {
		t.Fatalf("Highest() = %d, want 1000", tok)
	}
}
