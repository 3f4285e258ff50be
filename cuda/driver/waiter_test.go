package driver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaiterSpinsThenSleeps: no sleep while the wait is younger than spinFor, then
// sleeps from minPause doubling to maxPause (a fake clock; nothing here is timed).
func TestWaiterSpinsThenSleeps(t *testing.T) {
	clock := time.Unix(1000, 0)
	var slept []time.Duration
	w := Waiter{
		now:   func() time.Time { return clock },
		sleep: func(d time.Duration) { slept = append(slept, d); clock = clock.Add(d) },
	}
	for i := 0; i < 10; i++ {
		w.Wait()
		clock = clock.Add(spinFor / 20)
	}
	require.Empty(t, slept, "it slept within the first %v", spinFor)
	clock = clock.Add(spinFor)
	for i := 0; i < 8; i++ {
		w.Wait()
	}
	want := []time.Duration{minPause, 2 * minPause, 4 * minPause, 8 * minPause, 16 * minPause, 32 * minPause, maxPause, maxPause}
	for i := range want {
		want[i] = min(want[i], maxPause)
	}
	require.Equal(t, want, slept)
}
