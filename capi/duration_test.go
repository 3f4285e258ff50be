package main

import (
	"math"
	"testing"
	"time"
)

func TestMsDuration(t *testing.T) {
	const maxMs = int64(math.MaxInt64 / time.Millisecond)
	for _, c := range []struct {
		ms   int64
		want time.Duration
	}{
		{0, 0},
		{-1, 0},
		{math.MinInt64, 0}, // times 1e6 would wrap around to 0, a valid-looking value
		{1, time.Millisecond},
		{1500, 1500 * time.Millisecond},
		{maxMs, time.Duration(maxMs) * time.Millisecond},
		{maxMs + 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64},
	} {
		if got := msDuration(c.ms); got != c.want {
			t.Errorf("msDuration(%d) = %v, want %v", c.ms, got, c.want)
		}
	}
}
