package main

import (
	"math"
	"testing"
)

func TestPercentileNearestRank(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	cases := []struct {
		p    float64
		want float64
	}{
		{0, 1}, {1, 1}, {10, 1}, {11, 2}, {50, 5}, {51, 6}, {90, 9}, {99, 10}, {100, 10}, {150, 10}, {-5, 1},
	}
	for _, c := range cases {
		if got := percentile(v, c.p); got != c.want {
			t.Errorf("percentile(1..10, %v) = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestPercentileLarge(t *testing.T) {
	v := make([]float64, 1000)
	for i := range v {
		v[i] = float64(i + 1)
	}
	if got := percentile(v, 99); got != 990 {
		t.Errorf("p99 of 1..1000 = %v, want 990", got)
	}
	if got := percentile(v, 99.9); got != 999 {
		t.Errorf("p99.9 of 1..1000 = %v, want 999", got)
	}
	if got := percentile(v, 50); got != 500 {
		t.Errorf("p50 of 1..1000 = %v, want 500", got)
	}
}

func TestPercentileEdges(t *testing.T) {
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of empty slice should be NaN")
	}
	if got := percentile([]float64{7}, 99); got != 7 {
		t.Errorf("single value p99 = %v", got)
	}
	if got := percentile([]float64{-3, -1}, 50); got != -3 {
		t.Errorf("negative values p50 = %v, want -3", got)
	}
}

func TestSummarize(t *testing.T) {
	s, ok := summarize([]float64{5, 1, 3})
	if !ok || s.Median != 3 || s.Min != 1 || s.Max != 5 || s.N != 3 {
		t.Errorf("odd: %+v %v", s, ok)
	}
	s, ok = summarize([]float64{4, 1, 3, 10})
	if !ok || s.Median != 3.5 || s.Min != 1 || s.Max != 10 || s.N != 4 {
		t.Errorf("even: %+v %v", s, ok)
	}
	s, ok = summarize([]float64{2})
	if !ok || s.Median != 2 || s.Min != 2 || s.Max != 2 {
		t.Errorf("single: %+v", s)
	}
	s, ok = summarize([]float64{math.NaN(), 8, math.NaN(), 6})
	if !ok || s.Median != 7 || s.N != 2 {
		t.Errorf("with NaN: %+v", s)
	}
	if _, ok := summarize(nil); ok {
		t.Error("empty should not be ok")
	}
	if _, ok := summarize([]float64{math.NaN()}); ok {
		t.Error("all-NaN should not be ok")
	}
	in := []float64{3, 1, 2}
	summarize(in)
	if in[0] != 3 || in[1] != 1 {
		t.Error("summarize must not reorder its input")
	}
}
