package shm

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// A frame of an older generation is dropped whole, reported, and the frame of the
// current one after it is received intact; both through Recv and RecvPieces.
func TestDropsStaleFrames(t *testing.T) {
	for _, n := range []int{0, 64, 3 << 20} {
		a, b := pair(t, 1<<20)
		var stale []uint32
		b.OnStale(func(peer int, h transport.Header) { stale = append(stale, h.Epoch) })
		cur := transport.Header{Seq: 5, Kind: 1, DType: 7, Root: -1, Count: uint64(n), Epoch: 7}
		old := cur
		old.Epoch = 6
		want := pattern(n, 3)
		dl := time.Now().Add(10 * time.Second)
		errc := make(chan error, 1)
		go func() {
			if err := a.Send(&old, bytes.Repeat([]byte{0xee}, n+8), dl); err != nil {
				errc <- err
				return
			}
			if err := a.Send(&cur, want, dl); err != nil {
				errc <- err
				return
			}
			if err := a.Send(&old, []byte{1, 2, 3}, dl); err != nil {
				errc <- err
				return
			}
			errc <- a.Send(&cur, want, dl)
		}()
		got := make([]byte, n)
		require.NoError(t, b.Recv(&cur, got, dl))
		require.Equal(t, want, got)
		pieces := make([]byte, n)
		require.NoError(t, b.RecvPieces(&cur, n, 1, dl, sinkFunc(func(off int, p []byte) error {
			copy(pieces[off:], p)
			return nil
		})))
		require.Equal(t, want, pieces)
		require.NoError(t, <-errc)
		require.Equal(t, []uint32{6, 6}, stale)
		a.Close()
		b.Close()
	}
}
