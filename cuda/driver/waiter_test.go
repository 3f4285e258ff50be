package driver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaiterSleepsDoubling: every wait sleeps, from minPause doubling to maxPause (a
// fake sleep; nothing here is timed): no spinning on a poll.
func TestWaiterSleepsDoubling(t *testing.T) {
	var slept []time.Duration
	w := Waiter{sleep: func(d time.Duration) { slept = append(slept, d) }}
	for range 9 {
		w.Wait()
	}
	want := []time.Duration{minPause, 2 * minPause, 4 * minPause, 8 * minPause, 16 * minPause, 32 * minPause, 64 * minPause, maxPause, maxPause}
	for i := range want {
		want[i] = min(want[i], maxPause)
	}
	require.Equal(t, want, slept)
}
