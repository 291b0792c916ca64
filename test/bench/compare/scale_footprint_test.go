package main

import (
	"math"
	"testing"
)

func TestWatchesConstant(t *testing.T) {
	for _, tc := range []struct {
		name string
		rows []watchRow
		want bool
	}{
		{"no rows", nil, false},
		{"one row, no extra watch", []watchRow{{empty: 3, held: 3}}, true},
		{"one row, slack", []watchRow{{empty: 3, held: 3 + watchSlack}}, true},
		{"one row, above slack", []watchRow{{empty: 3, held: 4 + watchSlack}}, false},
		{"a watch per lock", []watchRow{{empty: 3, held: 1003}, {empty: 3, held: 10003}}, false},
		{"same at 1,000 and 10,000", []watchRow{{empty: 3, held: 3}, {empty: 3, held: 4}}, true},
		{"each near its empty, far from each other", []watchRow{{empty: 3, held: 3}, {empty: 8, held: 9}}, false},
		{"fewer than empty", []watchRow{{empty: 5, held: 3}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := watchesConstant(tc.rows); got != tc.want {
				t.Errorf("watchesConstant(%v) = %v, want %v", tc.rows, got, tc.want)
			}
		})
	}
}

func TestPerUnit(t *testing.T) {
	for _, tc := range []struct {
		after, before float64
		units         int
		want          float64
	}{
		{10, 4, 3, 2},
		{4, 10, 3, -2},
		{10, 4, 0, math.NaN()},
	} {
		got := perUnit(tc.after, tc.before, tc.units)
		if got != tc.want && !(math.IsNaN(got) && math.IsNaN(tc.want)) {
			t.Errorf("perUnit(%v, %v, %d) = %v, want %v", tc.after, tc.before, tc.units, got, tc.want)
		}
	}
}
