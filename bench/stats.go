package main

import (
	"math"
	"sort"
)

// percentile returns the p-th percentile (0..100) of sorted by the
// nearest-rank method: the smallest value with at least p% of the values at
// or below it. It returns NaN for an empty slice.
func percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	if p >= 100 {
		return sorted[n-1]
	}
	// The small epsilon keeps float error (0.999*1000 = 999.0000000000001)
	// from moving the rank up by one.
	rank := int(math.Ceil(p/100*float64(n) - 1e-9))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

// Summary is the median and range of one figure over rounds.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// summarize returns median, min and max of xs (NaN values are skipped); the
// median of an even count is the mean of the two middle values. ok is false
// when there is no value.
func summarize(xs []float64) (s Summary, ok bool) {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Summary{}, false
	}
	sort.Float64s(v)
	n := len(v)
	s = Summary{Min: v[0], Max: v[n-1], N: n}
	if n%2 == 1 {
		s.Median = v[n/2]
	} else {
		s.Median = (v[n/2-1] + v[n/2]) / 2
	}
	return s, true
}
