package shm

import (
	"bytes"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/gonccl/internal/testtime"
	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// pair connects two Links through a real segment handed over /proc/self/fd, the two
// sides in one process, with a net.Pipe as the liveness connection.
func pair(t testing.TB, ringSize int) (a, b *Link) {
	t.Helper()
	ca, cb := net.Pipe()
	dl := time.Now().Add(testtime.D(20 * time.Second))
	var errA error
	done := make(chan struct{})
	go func() {
		defer close(done)
		a, errA = Connect(ca, 1, true, ringSize, dl)
	}()
	b, errB := Connect(cb, 0, false, ringSize, dl)
	<-done
	require.NoError(t, errA)
	require.NoError(t, errB)
	return a, b
}

// resources counts this process's open fds and gonccl segment mappings.
func resources(t testing.TB) (fds, maps int) {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	m, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return len(ents), strings.Count(string(m), "gonccl-shm")
}

func noLeaks(t *testing.T) {
	fds, maps := resources(t)
	t.Cleanup(func() {
		require.Eventually(t, func() bool {
			f, m := resources(t)
			return f <= fds && m <= maps
		}, testtime.D(10*time.Second), 10*time.Millisecond, "leaked fds or segment mappings")
	})
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestRoundTrip(t *testing.T) {
	noLeaks(t)
	for _, ring := range []int{64, 4096, 1 << 16} {
		a, b := pair(t, ring)
		sizes := []int{0, 1, ring - 1, ring, ring + 1, 3*ring + 5, 1 << 20}
		for i, n := range sizes {
			h := transport.Header{Seq: uint64(i), Kind: 1, DType: 7, Algo: 2, Root: -1, Count: 99, Offset: 12}
			payload := pattern(n, byte(i))
			dl := time.Now().Add(testtime.D(20 * time.Second))
			errc := make(chan error, 1)
			sent := h
			sent.Flags = byte(1 + i%2) // not part of the match: handed back to the receiver
			go func() { errc <- a.Send(&sent, payload, dl) }()
			got := make([]byte, n)
			require.NoError(t, b.Recv(&h, got, dl), "ring %d size %d", ring, n)
			require.NoError(t, <-errc)
			require.True(t, bytes.Equal(payload, got), "ring %d size %d", ring, n)
			require.Equal(t, sent.Flags, h.Flags, "ring %d size %d", ring, n)
			h.Flags = 0
			// and back
			go func() { errc <- b.Send(&h, payload, dl) }()
			clear(got)
			require.NoError(t, a.Recv(&h, got, dl))
			require.NoError(t, <-errc)
			require.True(t, bytes.Equal(payload, got))
		}
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}
}

func TestMismatchLeavesPayload(t *testing.T) {
	noLeaks(t)
	a, b := pair(t, 4096)
	defer a.Close()
	defer b.Close()
	dl := time.Now().Add(testtime.D(20 * time.Second))
	sent := transport.Header{Seq: 1, Kind: 1, DType: 7, Count: 2048, Root: -1}
	require.NoError(t, a.Send(&sent, make([]byte, 16), dl))
	want := transport.Header{Seq: 1, Kind: 1, DType: 7, Count: 1024, Root: -1}
	err := b.Recv(&want, make([]byte, 16), dl)
	var me *transport.MismatchError
	require.ErrorAs(t, err, &me)
	require.ErrorIs(t, err, transport.ErrMismatch)
	require.Equal(t, uint64(2048), me.Got.Count)
	require.Equal(t, uint32(16), me.Got.Len)
	require.Equal(t, 0, me.Peer)
	require.Equal(t, uint64(transport.HeaderSize), b.tail, "the payload must stay unread")
}

func TestTimeout(t *testing.T) {
	noLeaks(t)
	a, b := pair(t, 64)
	defer a.Close()
	defer b.Close()
	start := time.Now()
	err := b.Recv(&transport.Header{}, nil, time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, transport.ErrTimeout)
	require.Less(t, time.Since(start), testtime.D(10*time.Second))
	// A sender whose frame does not fit times out too.
	err = a.Send(&transport.Header{}, make([]byte, 1000), time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, transport.ErrTimeout)
}

// A wake-up that never comes costs a sleeper one bounded sleep (maxSleep), not the
// rest of its deadline: the sender here publishes a frame without waking the
// receiver, which is asleep on the futex.
func TestLostWakeupCostsOneSleep(t *testing.T) {
	noLeaks(t)
	a, b := pair(t, 4096)
	defer a.Close()
	defer b.Close()
	p := make([]byte, 100)
	got := make(chan error, 1)
	go func() { got <- b.Recv(&transport.Header{Seq: 1}, p, time.Now().Add(testtime.D(60*time.Second))) }()
	require.Eventually(t, func() bool { return b.rx.dataWait.Load() == 1 }, testtime.D(10*time.Second), time.Millisecond,
		"the receiver never went to sleep")
	transport.EncodeHeader(a.hb[:], &transport.Header{Seq: 1}, uint32(len(p)))
	require.NoError(t, a.write(a.hb[:], time.Time{}))
	require.NoError(t, a.write(pattern(len(p), 3), time.Time{}))
	a.pub = a.head
	a.tx.head.Store(a.head) // published, but nobody wakes the receiver
	select {
	case err := <-got:
		require.NoError(t, err)
		require.Equal(t, pattern(len(p), 3), p)
	case <-time.After(testtime.D(10 * time.Second)):
		t.Fatal("the receiver slept through a frame that had arrived: a lost wake-up costs the whole deadline")
	}
}

func TestCloseWakesBlockedCalls(t *testing.T) {
	noLeaks(t)
	for _, who := range []string{"self", "peer"} {
		a, b := pair(t, 64)
		recvErr := make(chan error, 1)
		sendErr := make(chan error, 1)
		dl := time.Now().Add(testtime.D(2 * time.Minute))
		go func() { recvErr <- b.Recv(&transport.Header{}, nil, dl) }()
		go func() { sendErr <- b.Send(&transport.Header{}, make([]byte, 1000), dl) }()
		require.Eventually(t, func() bool { return b.rx.dataWait.Load() == 1 && b.tx.spaceWait.Load() == 1 },
			testtime.D(10*time.Second), time.Millisecond, "%s: the calls never went to sleep on the futex", who)
		start := time.Now()
		if who == "self" {
			go b.Close()
		} else {
			a.Close()
		}
		for _, c := range []chan error{recvErr, sendErr} {
			select {
			case err := <-c:
				require.ErrorIs(t, err, transport.ErrPeerClosed, who)
			case <-time.After(testtime.D(20 * time.Second)):
				t.Fatalf("%s close: a blocked call did not return", who)
			}
		}
		require.Less(t, time.Since(start), testtime.D(20*time.Second), "woken by the close, not by the deadline")
		a.Close()
		b.Close()
	}
}

// The liveness connection's EOF (the peer process died) ends waits even though the
// peer never marked the segment closed.
func TestPeerDeathWakesReceiver(t *testing.T) {
	noLeaks(t)
	a, b := pair(t, 64)
	defer b.Close()
	recvErr := make(chan error, 1)
	go func() { recvErr <- b.Recv(&transport.Header{}, nil, time.Now().Add(testtime.D(2*time.Minute))) }()
	require.Eventually(t, func() bool { return b.rx.dataWait.Load() == 1 }, testtime.D(10*time.Second), time.Millisecond,
		"the receiver never went to sleep")
	a.conn.Close() // as the kernel does when a process dies
	select {
	case err := <-recvErr:
		require.ErrorIs(t, err, transport.ErrPeerClosed)
	case <-time.After(testtime.D(20 * time.Second)):
		t.Fatal("peer death did not wake the receiver")
	}
	a.Close()
}

// A peer that writes its last frame and exits between the receiver's look for data and
// its look at the peer (a rank that leaves a barrier first and closes) must not lose
// that frame: the receiver looks for data once more before it reports the peer gone.
func TestLastFrameBeforeExitIsRead(t *testing.T) {
	noLeaks(t)
	a, b := pair(t, 4096)
	defer b.Close()
	defer a.Close()
	h := transport.Header{Seq: 5, Count: 4, Root: -1}
	dl := time.Now().Add(testtime.D(20 * time.Second))
	var once sync.Once
	beforeStopCheck = func(l *Link) {
		if l != b {
			return
		}
		once.Do(func() {
			require.NoError(t, a.Send(&h, []byte("bye!"), dl))
			b.peerGone.Store(true) // as b's liveness watch does once a's process is gone
		})
	}
	defer func() { beforeStopCheck = nil }()
	got := make([]byte, 4)
	require.NoError(t, b.Recv(&h, got, dl))
	require.Equal(t, "bye!", string(got))
	require.ErrorIs(t, b.Recv(&h, got, dl), transport.ErrPeerClosed)
}

// Frames written before the peer closed can still be read: a failed rank's last frame
// reaches its peer, which can then report the mismatch itself.
func TestFailDeliversFramesInGrace(t *testing.T) {
	noLeaks(t)
	a, b := pair(t, 4096)
	defer b.Close()
	h := transport.Header{Seq: 3, Count: 10, Root: -1}
	a.Fail(testtime.D(time.Second)) // long enough for the Send below to come first on a loaded machine
	dl := time.Now().Add(testtime.D(20 * time.Second))
	require.ErrorIs(t, a.Recv(&h, nil, dl), transport.ErrPeerClosed)
	require.NoError(t, a.Send(&h, []byte("last words"), dl))
	require.Eventually(t, func() bool { return b.seg.closed(a.side).Load() != 0 }, testtime.D(10*time.Second),
		time.Millisecond, "the failed side never closed after its grace")
	got := make([]byte, 10)
	require.NoError(t, b.Recv(&h, got, dl))
	require.Equal(t, "last words", string(got))
	require.ErrorIs(t, b.Recv(&h, got, dl), transport.ErrPeerClosed)
	require.ErrorIs(t, a.Send(&h, got, dl), transport.ErrPeerClosed)
}

// Both sides send and receive large frames at once, one goroutine per direction.
func TestConcurrentBothWays(t *testing.T) {
	noLeaks(t)
	a, b := pair(t, 1<<16)
	defer a.Close()
	defer b.Close()
	const frames = 20
	dl := time.Now().Add(testtime.D(60 * time.Second))
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for side, l := range []*Link{a, b} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := 0; i < frames; i++ {
				h := transport.Header{Seq: uint64(i), Root: int32(side)}
				if err := l.Send(&h, pattern(1<<20+i, byte(side+i)), dl); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := 0; i < frames; i++ {
				h := transport.Header{Seq: uint64(i), Root: int32(1 - side)}
				got := make([]byte, 1<<20+i)
				if err := l.Recv(&h, got, dl); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(got, pattern(1<<20+i, byte(1-side+i))) {
					errs <- errors.New("corrupt frame")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestConnectRejectsBadRingSize(t *testing.T) {
	ca, cb := net.Pipe()
	defer ca.Close()
	defer cb.Close()
	_, err := Connect(ca, 1, true, 1000, time.Now().Add(time.Second))
	require.ErrorIs(t, err, ErrUnavailable)
}

// An opener that cannot map the segment answers no; both sides then keep the
// connection, in step, for TCP.
func TestConnectFallsBackWhenPeerCannotMap(t *testing.T) {
	noLeaks(t)
	ca, cb := net.Pipe()
	defer ca.Close()
	defer cb.Close()
	dl := time.Now().Add(testtime.D(20 * time.Second))
	errc := make(chan error, 1)
	go func() {
		_, err := Connect(ca, 1, true, 4096, dl)
		errc <- err
	}()
	_, err := Connect(cb, 0, false, 8192, dl) // disagrees on the size
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, <-errc, ErrUnavailable)
	// The connection is still in step.
	go func() { _, _ = ca.Write([]byte("ok")) }()
	buf := make([]byte, 2)
	_, err = cb.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "ok", string(buf))
}

// RecvPieces hands out the payload in place, in whole elements, with elements split by
// the ring's end passed whole through a copy; mixed with Recv the stream stays in step.
func TestRecvPiecesWholeElements(t *testing.T) {
	noLeaks(t)
	for _, ring := range []int{64, 4096} {
		a, b := pair(t, ring)
		straddled := 0
		for i, elem := range []int{1, 2, 4, 8, 16, 8, 16, 4} {
			for _, count := range []int{0, 1, 3, ring/elem + 1, 5*ring/elem + 3} {
				n := count * elem
				h := transport.Header{Seq: uint64(i), Kind: 1, DType: 7, Root: -1, Count: uint64(count)}
				payload := pattern(n, byte(i+count))
				dl := time.Now().Add(testtime.D(20 * time.Second))
				errc := make(chan error, 1)
				go func() { errc <- a.Send(&h, payload, dl) }()
				got := make([]byte, 0, n)
				err := b.RecvPieces(&h, n, elem, dl, sinkFunc(func(off int, piece []byte) error {
					require.Equal(t, len(got), off, "pieces arrive in order")
					require.Zero(t, len(piece)%elem, "piece of %d bytes, elements of %d", len(piece), elem)
					require.NotZero(t, len(piece))
					if len(piece) == elem && &piece[0] == &b.straddle[0] {
						straddled++
					}
					got = append(got, piece...)
					return nil
				}))
				require.NoError(t, err, "ring %d elem %d count %d", ring, elem, count)
				require.NoError(t, <-errc)
				require.True(t, bytes.Equal(payload, got), "ring %d elem %d count %d", ring, elem, count)
				// a plain Recv after it still finds the next frame's header
				go func() { errc <- a.Send(&h, payload[:min(n, 3)], dl) }()
				small := make([]byte, min(n, 3))
				require.NoError(t, b.Recv(&h, small, dl))
				require.NoError(t, <-errc)
			}
		}
		require.NotZero(t, straddled, "ring %d: no element ever straddled the ring's end", ring)
		bad := b.RecvPieces(&transport.Header{}, 10, 4, time.Now().Add(time.Second), nil)
		require.ErrorIs(t, bad, transport.ErrMismatch, "10 bytes are not whole 4-byte elements")
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	}
}

type sinkFunc func(off int, piece []byte) error

func (f sinkFunc) Piece(off int, piece []byte) error { return f(off, piece) }

// TrySend sends a frame only when the ring takes all of it at once: then the receiver
// reads it as a Send's; when it does not fit (with the header), nothing is written and
// a Send of the same frame still goes through once there is room. A failed link
// reports false, leaving Send to say why.
func TestTrySendOnlyWhatFitsWhole(t *testing.T) {
	noLeaks(t)
	const ring = 4096
	a, b := pair(t, ring)
	defer a.Close()
	defer b.Close()
	var _ transport.ImmediateSender = a
	dl := time.Now().Add(testtime.D(20 * time.Second))
	h := transport.Header{Seq: 1, Kind: 1, DType: 7, Root: -1, Count: 9}
	first := pattern(ring-transport.HeaderSize, 1) // exactly fills the ring
	sent, err := a.TrySend(&h, first)
	require.NoError(t, err)
	require.True(t, sent)
	second := pattern(1, 2)
	sent, err = a.TrySend(&h, second) // no room left, not even for its header
	require.NoError(t, err)
	require.False(t, sent)
	got := make([]byte, len(first))
	require.NoError(t, b.Recv(&h, got, dl))
	require.Equal(t, first, got)
	sent, err = a.TrySend(&h, pattern(ring, 3)) // never fits whole: the header too
	require.NoError(t, err)
	require.False(t, sent)
	sent, err = a.TrySend(&h, second)
	require.NoError(t, err)
	require.True(t, sent)
	got = make([]byte, 1)
	require.NoError(t, b.Recv(&h, got, dl))
	require.Equal(t, second, got)
	a.Fail(0)
	sent, err = a.TrySend(&h, second)
	require.NoError(t, err)
	require.False(t, sent, "a failed link takes nothing")
}
