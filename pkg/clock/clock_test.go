package clock

import (
	"testing"
	"time"
)

func TestAddSub(t *testing.T) {
	tests := []struct {
		name string
		i    Instant
		d    time.Duration
	}{
		{"zero", 5, 0},
		{"forward", 1000, 3 * time.Second},
		{"backward", 1000, -time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.i.Add(tt.d)
			if want := tt.i + Instant(tt.d); got != want {
				t.Errorf("%d.Add(%v) = %d, want %d", tt.i, tt.d, got, want)
			}
			if back := got.Sub(tt.i); back != tt.d {
				t.Errorf("%d.Sub(%d) = %v, want %v", got, tt.i, back, tt.d)
			}
		})
	}
}

// TestNowNeverGoesBack reads the clock many times in a row.
func TestNowNeverGoesBack(t *testing.T) {
	prev := Now()
	for range 100000 {
		n := Now()
		if n < prev {
			t.Fatalf("Now() = %d after %d: the clock went back", n, prev)
		}
		prev = n
	}
}

// TestNowCountsTime: Now advances as Go's monotonic clock does while the process runs (no
// suspend happens during a test).
func TestNowCountsTime(t *testing.T) {
	start, wall := Now(), time.Now()
	time.Sleep(50 * time.Millisecond)
	got, want := Now().Sub(start), time.Since(wall)
	if diff := (got - want).Abs(); diff > 20*time.Millisecond {
		t.Errorf("Now advanced %v while Go's monotonic clock advanced %v", got, want)
	}
}

// TestWall: an Instant a second ahead projects to a time.Time about a second after time.Now().
func TestWall(t *testing.T) {
	w := Now().Add(time.Second).Wall()
	if left := time.Until(w); left <= 900*time.Millisecond || left > time.Second {
		t.Errorf("time.Until(Now().Add(1s).Wall()) = %v, want just under 1s", left)
	}
}

// TestFastNeverAheadOfNow: Fast, read just before Now, is never later than it.
func TestFastNeverAheadOfNow(t *testing.T) {
	for range 100000 {
		f := Fast()
		n := Now()
		if f > n {
			t.Fatalf("Fast() = %d after Now() = %d", f, n)
		}
	}
	// and it keeps up: without a suspend the two differ by the time between the reads
	f, n := Fast(), Now()
	if lag := n.Sub(f); lag > 10*time.Millisecond {
		t.Errorf("Fast() lags Now() by %v without a suspend", lag)
	}
}
