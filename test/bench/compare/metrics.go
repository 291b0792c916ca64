package main

import (
	"fmt"
	"io"
	"math"
	"sort"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// families is one scrape of a Prometheus endpoint.
type families map[string]*dto.MetricFamily

func parseMetrics(r io.Reader) (families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

func labelsOf(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return 0
}

// sum adds the values of name's series that keep accepts (all when keep is nil).
func sum(f families, name string, keep func(map[string]string) bool) float64 {
	total := 0.0
	for _, m := range f[name].GetMetric() {
		if keep == nil || keep(labelsOf(m)) {
			total += valueOf(m)
		}
	}
	return total
}

// byKey sums name's series that keep accepts, grouped by key(labels).
func byKey(f families, name string, keep func(map[string]string) bool, key func(map[string]string) string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f[name].GetMetric() {
		l := labelsOf(m)
		if keep == nil || keep(l) {
			out[key(l)] += valueOf(m)
		}
	}
	return out
}

// rates is (after - before) / seconds for every key of after.
func rates(before, after map[string]float64, seconds float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d / seconds
		}
	}
	return out
}

// bucketCounts merges the cumulative buckets of name's histograms that keep accepts.
func bucketCounts(f families, name string, keep func(map[string]string) bool) (bounds []float64, counts []float64) {
	acc := map[float64]float64{}
	for _, m := range f[name].GetMetric() {
		if keep != nil && !keep(labelsOf(m)) {
			continue
		}
		hasInf := false
		for _, b := range m.GetHistogram().GetBucket() {
			acc[b.GetUpperBound()] += float64(b.GetCumulativeCount())
			hasInf = hasInf || math.IsInf(b.GetUpperBound(), 1)
		}
		if !hasInf {
			acc[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	for b := range acc {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	for _, b := range bounds {
		counts = append(counts, acc[b])
	}
	return bounds, counts
}

// histogramQuantile is Prometheus' histogram_quantile over the merged buckets (linear
// interpolation inside the bucket), NaN when empty. It also returns the sample count.
func histogramQuantile(q float64, f families, name string, keep func(map[string]string) bool) (float64, float64) {
	bounds, counts := bucketCounts(f, name, keep)
	if len(counts) == 0 || counts[len(counts)-1] == 0 {
		return math.NaN(), 0
	}
	total := counts[len(counts)-1]
	rank := q * total
	lower, below := 0.0, 0.0
	for i, b := range bounds {
		if counts[i] >= rank {
			if math.IsInf(b, 1) {
				return lower, total // above the highest finite bound: report that bound
			}
			in := counts[i] - below
			if in == 0 {
				return b, total
			}
			return lower + (b-lower)*(rank-below)/in, total
		}
		lower, below = b, counts[i]
	}
	return lower, total
}
