package tcp

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// staleLog collects what a link's StaleHandler is told.
type staleLog struct {
	mu  sync.Mutex
	got []transport.Header
}

func (s *staleLog) handler(peer int, h transport.Header) {
	s.mu.Lock()
	s.got = append(s.got, h)
	s.mu.Unlock()
}

func (s *staleLog) epochs() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var e []uint32
	for _, h := range s.got {
		e = append(e, h.Epoch)
	}
	return e
}

// sendStaleThenCurrent sends a frame of epoch 1 (a late frame of the old generation,
// with a payload that must not reach the receiver) and then the frame of epoch 2 the
// receiver waits for, and checks that the receiver gets exactly the second.
func sendStaleThenCurrent(t *testing.T, a, b transport.Link, n int) {
	t.Helper()
	log := &staleLog{}
	b.(transport.StaleDropper).OnStale(log.handler)
	cur := transport.Header{Seq: 5, Kind: 1, DType: 7, Root: -1, Count: uint64(n), Epoch: 2}
	old := cur
	old.Epoch, old.Seq = 1, 9
	stale := bytes.Repeat([]byte{0xee}, n+100) // another length too: dropped whole
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*13 + 1)
	}
	dl := time.Now().Add(10 * time.Second)
	errc := make(chan error, 1)
	go func() {
		if err := a.Send(&old, stale, dl); err != nil {
			errc <- err
			return
		}
		errc <- a.Send(&cur, want, dl)
	}()
	got := make([]byte, n)
	require.NoError(t, b.Recv(&cur, got, dl))
	require.NoError(t, <-errc)
	require.Equal(t, want, got)
	require.Equal(t, []uint32{1}, log.epochs(), "the stale frame must be reported once")

	// A frame of a newer generation than the receiver's is not dropped: it is a
	// mismatch (this rank is the one left behind).
	newer := cur
	newer.Epoch = 3
	go func() { errc <- a.Send(&newer, want, dl) }()
	err := b.Recv(&cur, got, dl)
	require.ErrorIs(t, err, transport.ErrMismatch)
	a.Close()
	<-errc
}

func TestStreamLinkDropsStaleFrames(t *testing.T) {
	for _, n := range []int{0, 64, transport.SmallFrame + 1, 1 << 20} {
		a, b := pipeLinks()
		sendStaleThenCurrent(t, a, b, n)
		b.Close()
	}
}

func TestStripedLinkDropsStaleFrames(t *testing.T) {
	for _, n := range []int{64, 4 * minStripe, 4*minStripe + 1234} {
		a, b := stripedPair(t, tcpConns, 4, 2)
		sendStaleThenCurrent(t, a, b, n)
	}
}
