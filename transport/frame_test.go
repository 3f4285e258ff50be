package transport

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeaderCarriesEpochAndFlags(t *testing.T) {
	for _, h := range []Header{
		{Seq: 1, Kind: 2, Root: -1, Epoch: MaxEpoch, Flags: FlagZeroCopyReady},
		{Seq: 1, Kind: 2, Root: -1, Epoch: 0xbeef12},
		{Seq: 3, Kind: 2, Root: 7, Epoch: 0, Flags: 0xff},
	} {
		b := make([]byte, HeaderSize)
		EncodeHeader(b, &h, 0)
		got, err := DecodeHeader(b)
		require.NoError(t, err)
		require.Equal(t, h, got)
	}
}

// Flags are not part of a frame's match; every other field is.
func TestMatchesIgnoresOnlyFlags(t *testing.T) {
	want := Header{Seq: 5, Kind: 1, DType: 7, Op: 2, Algo: 3, Root: -1, Count: 9, Offset: 4, Len: 8, Epoch: 2}
	got := want
	got.Flags = FlagZeroCopyReady
	require.True(t, got.Matches(&want))
	for _, change := range []func(h *Header){
		func(h *Header) { h.Seq++ }, func(h *Header) { h.Kind++ }, func(h *Header) { h.DType++ },
		func(h *Header) { h.Op++ }, func(h *Header) { h.Algo++ }, func(h *Header) { h.Root++ },
		func(h *Header) { h.Count++ }, func(h *Header) { h.Offset++ }, func(h *Header) { h.Len++ },
		func(h *Header) { h.Epoch++ },
	} {
		g := got
		change(&g)
		require.False(t, g.Matches(&want), "%+v matched %+v", g, want)
	}
}

// A connection's error keeps its cause for errors.Is, besides the sentinel: core tells
// a reconnect that gave up (the peer's host is gone) from a link the peer closed.
func TestWrapConnErrKeepsTheCause(t *testing.T) {
	gone := errors.New("link down past the retry window")
	err := WrapConnErr(3, "receive from", fmt.Errorf("rank 3: %w", gone))
	require.ErrorIs(t, err, ErrPeerClosed)
	require.ErrorIs(t, err, gone)
	require.NotErrorIs(t, err, ErrTimeout)
	require.EqualError(t, err, "receive from rank 3: connection closed (rank 3: link down past the retry window)")
	err = WrapConnErr(3, "send to", fmt.Errorf("write: %w", os.ErrDeadlineExceeded))
	require.ErrorIs(t, err, ErrTimeout)
	require.NotErrorIs(t, err, ErrPeerClosed)
}
