package transport

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func pipeLinks() (*StreamLink, *StreamLink) {
	a, b := net.Pipe()
	return NewStreamLink(1, a), NewStreamLink(0, b)
}

func TestStreamLinkRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, smallFrame, smallFrame + 1, 1 << 20} {
		a, b := pipeLinks()
		h := Header{Seq: 7, Kind: 1, DType: 7, Op: 0, Algo: 2, Root: -1, Count: 99, Offset: 12}
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		dl := time.Now().Add(5 * time.Second)
		errc := make(chan error, 1)
		go func() { errc <- a.Send(&h, payload, dl) }()
		got := make([]byte, n)
		require.NoError(t, b.Recv(&h, got, dl))
		require.NoError(t, <-errc)
		require.Equal(t, payload, got)
		a.Close()
		b.Close()
	}
}

func TestStreamLinkMismatch(t *testing.T) {
	a, b := pipeLinks()
	defer a.Close()
	defer b.Close()
	dl := time.Now().Add(5 * time.Second)
	sent := Header{Seq: 1, Kind: 1, DType: 7, Count: 2048, Root: -1}
	go func() { _ = a.Send(&sent, make([]byte, 16), dl) }()
	want := Header{Seq: 1, Kind: 1, DType: 7, Count: 1024, Root: -1}
	err := b.Recv(&want, make([]byte, 16), dl)
	var me *MismatchError
	require.ErrorAs(t, err, &me)
	require.True(t, errors.Is(err, ErrMismatch))
	require.Equal(t, uint64(2048), me.Got.Count)
	require.Equal(t, 0, me.Peer)
}

func TestStreamLinkTimeoutAndClose(t *testing.T) {
	a, b := pipeLinks()
	err := b.Recv(&Header{}, nil, time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, ErrTimeout)
	a.Close()
	err = b.Recv(&Header{}, nil, time.Now().Add(time.Second))
	require.ErrorIs(t, err, ErrPeerClosed)
	b.Close()
}

func TestStreamLinkRejectsGarbage(t *testing.T) {
	a, b := net.Pipe()
	l := NewStreamLink(0, b)
	defer a.Close()
	defer l.Close()
	go func() { _, _ = a.Write(make([]byte, headerSize)) }()
	err := l.Recv(&Header{}, nil, time.Now().Add(time.Second))
	require.ErrorContains(t, err, "bad frame magic")
}
