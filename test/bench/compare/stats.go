package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// percentile is the nearest-rank percentile of ds (p in [0,1]); 0 when empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// seconds shows a duration in seconds with about three significant digits.
func seconds(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s >= 10:
		return fmt.Sprintf("%.1f", s)
	case s >= 1:
		return fmt.Sprintf("%.2f", s)
	default:
		return fmt.Sprintf("%.3f", s)
	}
}

// ms shows a duration in milliseconds.
func ms(d time.Duration) string {
	m := float64(d) / float64(time.Millisecond)
	if m >= 100 {
		return fmt.Sprintf("%.0f", m)
	}
	return fmt.Sprintf("%.1f", m)
}

// brief is "n=…, p50 …, p99 …, max …" in seconds.
func brief(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	return fmt.Sprintf("n=%d p50 %ss p99 %ss max %ss", len(ds), seconds(percentile(ds, 0.5)), seconds(percentile(ds, 0.99)), seconds(slices.Max(ds)))
}

// ratio is a/b for durations, NaN when b is 0.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// fmtRatio shows a ratio with about three significant digits.
func fmtRatio(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "n/a"
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	case x >= 0.1:
		return fmt.Sprintf("%.2f", x)
	case x >= 0.01 || x == 0:
		return fmt.Sprintf("%.3f", x)
	default:
		return fmt.Sprintf("%.1g", x)
	}
}
