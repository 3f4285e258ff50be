package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitCommsErr waits (5s at most) until want(c.Err()) for every rank.
func waitCommsErr(t *testing.T, comms []*Comm, want func(error) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r, c := range comms {
		for !want(c.Err()) {
			require.True(t, time.Now().Before(deadline), "rank %d: %v", r, c.Err())
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// Device-path sends and receives of equal sizes pass, whichever side notes its
// message first, between ranks with a channel and ranks without one yet (rank 4 and
// rank 2 connect for it), and to oneself.
func TestDeviceP2PSizesMatch(t *testing.T) {
	comms := initAllTimeout(t, 5, 30*time.Second)
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	require.Nil(t, comms[4].p2p.peer(2), "ranks 4 and 2 start without a channel")
	sizes := []int{0, 100, 1 << 20, 7}
	for _, b := range sizes[:2] {
		comms[2].NoteDeviceRecv(4, b) // before the announcement
	}
	for _, b := range sizes {
		comms[4].NoteDeviceSend(2, b)
		comms[1].NoteDeviceSend(0, b)
		comms[3].NoteDeviceSend(3, b)
		comms[3].NoteDeviceRecv(3, b)
	}
	time.Sleep(50 * time.Millisecond)
	for _, b := range sizes[2:] {
		comms[2].NoteDeviceRecv(4, b)
	}
	for _, b := range sizes {
		comms[0].NoteDeviceRecv(1, b)
	}
	compared := func(c *Comm, peer int) uint64 {
		c.devSizes.mu.Lock()
		defer c.devSizes.mu.Unlock()
		if c.devSizes.peers == nil {
			return 0
		}
		return c.devSizes.peers[peer].compared
	}
	deadline := time.Now().Add(5 * time.Second)
	for compared(comms[2], 4) != 4 || compared(comms[0], 1) != 4 {
		require.True(t, time.Now().Before(deadline), "compared %d from rank 4, %d from rank 1",
			compared(comms[2], 4), compared(comms[0], 1))
		time.Sleep(5 * time.Millisecond)
	}
	require.EqualValues(t, 4, compared(comms[3], 3))
	for r, c := range comms {
		require.NoError(t, c.Err(), "rank %d", r)
	}
}

// A device-path send whose receive has another size breaks both ranks' communicators
// (and every other rank's) with a mismatch naming both sizes, both ranks and the
// message's number; the same for a pair with no channel yet (rank 4 to rank 2).
func TestDeviceP2PSizeMismatch(t *testing.T) {
	for _, tc := range []struct{ src, dst int }{{1, 0}, {4, 2}} {
		comms := initAllTimeout(t, 5, 30*time.Second)
		for _, b := range []int{100, 4000, 7} {
			comms[tc.src].NoteDeviceSend(tc.dst, b)
		}
		for _, b := range []int{100, 3000, 7} {
			comms[tc.dst].NoteDeviceRecv(tc.src, b)
		}
		waitCommsErr(t, comms, func(err error) bool { return errors.Is(err, ErrMismatch) })
		want := fmt.Sprintf("rank %d sent 4000 bytes to rank %d (device message #2) but rank %d's receive expects 3000 bytes",
			tc.src, tc.dst, tc.dst)
		for r, c := range comms {
			require.ErrorContains(t, c.Err(), want, "rank %d", r)
			if r != tc.dst {
				require.ErrorContains(t, c.Err(), fmt.Sprintf("rank %d reports: ", tc.dst), "rank %d", r)
			}
		}
		for _, c := range comms {
			c.Abort()
		}
	}
}

// A send to oneself is compared at once; only the first mismatch is reported.
func TestDeviceP2PSizeMismatchSelf(t *testing.T) {
	comms := memComms(t, 2, nil)
	c := comms[1]
	c.NoteDeviceRecv(1, 64)
	c.NoteDeviceSend(1, 64)
	require.NoError(t, c.Err())
	c.NoteDeviceSend(1, 8)
	c.NoteDeviceRecv(1, 16)
	require.ErrorIs(t, c.Err(), ErrMismatch)
	require.ErrorContains(t, c.Err(), "rank 1 sent 8 bytes to rank 1 (device message #2) but rank 1's receive expects 16 bytes")
	c.NoteDeviceSend(1, 1)
	c.NoteDeviceRecv(1, 2)
	require.ErrorContains(t, c.Err(), "(device message #2)")
}

// An announcement that never came (its channel could not be made) stops the checks
// from that peer rather than compare the wrong messages.
func TestDeviceP2PSizeLostAnnouncement(t *testing.T) {
	comms := memComms(t, 2, nil)
	c := comms[1]
	c.devSizeAnnounced(0, 1, 64)
	c.NoteDeviceRecv(0, 64)
	c.devSizeAnnounced(0, 3, 8) // #2 lost
	c.NoteDeviceRecv(0, 32)
	c.NoteDeviceRecv(0, 16)
	require.NoError(t, c.Err())
	c.devSizes.mu.Lock()
	defer c.devSizes.mu.Unlock()
	require.True(t, c.devSizes.peers[0].unchecked)
	require.Empty(t, c.devSizes.peers[0].expected)
}
