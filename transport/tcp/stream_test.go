package tcp

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

func pipeLinks() (*StreamLink, *StreamLink) {
	a, b := net.Pipe()
	return NewStreamLink(1, a), NewStreamLink(0, b)
}

func TestStreamLinkRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, transport.SmallFrame, transport.SmallFrame + 1, 1 << 20} {
		a, b := pipeLinks()
		h := transport.Header{Seq: 7, Kind: 1, DType: 7, Op: 0, Algo: 2, Root: -1, Count: 99, Offset: 12}
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		dl := time.Now().Add(5 * time.Second)
		errc := make(chan error, 1)
		sent := h
		sent.Flags = byte(n % 2) // not part of the match: handed back to the receiver
		go func() { errc <- a.Send(&sent, payload, dl) }()
		got := make([]byte, n)
		require.NoError(t, b.Recv(&h, got, dl))
		require.NoError(t, <-errc)
		require.Equal(t, payload, got)
		require.Equal(t, sent.Flags, h.Flags)
		a.Close()
		b.Close()
	}
}

func TestStreamLinkMismatch(t *testing.T) {
	a, b := pipeLinks()
	defer a.Close()
	defer b.Close()
	dl := time.Now().Add(5 * time.Second)
	sent := transport.Header{Seq: 1, Kind: 1, DType: 7, Count: 2048, Root: -1}
	go func() { _ = a.Send(&sent, make([]byte, 16), dl) }()
	want := transport.Header{Seq: 1, Kind: 1, DType: 7, Count: 1024, Root: -1}
	err := b.Recv(&want, make([]byte, 16), dl)
	var me *transport.MismatchError
	require.ErrorAs(t, err, &me)
	require.True(t, errors.Is(err, transport.ErrMismatch))
	require.Equal(t, uint64(2048), me.Got.Count)
	require.Equal(t, 0, me.Peer)
}

func TestStreamLinkTimeoutAndClose(t *testing.T) {
	a, b := pipeLinks()
	err := b.Recv(&transport.Header{}, nil, time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, transport.ErrTimeout)
	a.Close()
	err = b.Recv(&transport.Header{}, nil, time.Now().Add(time.Second))
	require.ErrorIs(t, err, transport.ErrPeerClosed)
	b.Close()
}

func TestStreamLinkRejectsGarbage(t *testing.T) {
	a, b := net.Pipe()
	l := NewStreamLink(0, b)
	defer a.Close()
	defer l.Close()
	go func() { _, _ = a.Write(make([]byte, transport.HeaderSize)) }()
	err := l.Recv(&transport.Header{}, nil, time.Now().Add(time.Second))
	require.ErrorContains(t, err, "bad frame magic")
}

// Sending and receiving frames allocates nothing, small or large (writev included).
func TestStreamLinkDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	ca, cb := tcpConns(t, 1)
	a, b := NewStreamLink(1, ca[0]), NewStreamLink(0, cb[0])
	defer a.Close()
	defer b.Close()
	requireNoAllocs(t, a, b, 64, 1<<20)
}

// requireNoAllocs sends a frame of each size from a to b, twenty times, and fails if
// a round trip allocates on the Go heap.
func requireNoAllocs(t *testing.T, a, b transport.Link, sizes ...int) {
	t.Helper()
	for _, n := range sizes {
		h := transport.Header{Seq: 1, Count: uint64(n)}
		src, dst := make([]byte, n), make([]byte, n)
		dl := time.Now().Add(time.Minute)
		kick, done := make(chan struct{}), make(chan error)
		go func() {
			for range kick {
				done <- a.Send(&h, src, dl)
			}
		}()
		allocs := testing.AllocsPerRun(20, func() {
			kick <- struct{}{}
			if err := b.Recv(&h, dst, dl); err != nil {
				panic(err)
			}
			if err := <-done; err != nil {
				panic(err)
			}
		})
		close(kick)
		require.Zero(t, allocs, "%d-byte frames", n)
	}
}
