package tcp

import (
	"errors"
	"fmt"
	"math/rand"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// tcpConns returns k connected loopback TCP pairs (a's ends, b's ends), tuned as the
// tcp package tunes them.
func tcpConns(t *testing.T, k int) (a, b []net.Conn) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer l.Close()
	for i := 0; i < k; i++ {
		c, err := net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
		require.NoError(t, err)
		s, err := l.AcceptTCP()
		require.NoError(t, err)
		for _, x := range []*net.TCPConn{c, s} {
			require.NoError(t, x.SetNoDelay(true))
		}
		a, b = append(a, c), append(b, s)
	}
	return a, b
}

// pipeConns returns k net.Pipe pairs: unbuffered, so a schedule that relies on
// buffering deadlocks here.
func pipeConns(t *testing.T, k int) (a, b []net.Conn) {
	for i := 0; i < k; i++ {
		c, s := net.Pipe()
		a, b = append(a, c), append(b, s)
	}
	return a, b
}

type connMaker func(t *testing.T, k int) (a, b []net.Conn)

var connKinds = map[string]connMaker{"pipe": pipeConns, "tcp": tcpConns}

// stripedPair returns rank 0's link to rank 1 and rank 1's link to rank 0.
func stripedPair(t *testing.T, mk connMaker, socks, threads int) (*StripedLink, *StripedLink) {
	t.Helper()
	ca, cb := mk(t, socks)
	a, err := NewStripedLink(1, ca, threads)
	require.NoError(t, err)
	b, err := NewStripedLink(0, cb, threads)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func randomBytes(rng *rand.Rand, n int) []byte {
	p := make([]byte, n)
	rng.Read(p)
	return p
}

func TestStripesCoverTheFrame(t *testing.T) {
	for _, socks := range []int{1, 2, 3, 4, 7, 16} {
		for _, n := range []int{0, 1, 4096, 2*minStripe - 1, 2 * minStripe, 2*minStripe + 1, 3*minStripe + 5,
			1 << 20, 1<<20 + 13, 64<<20 + 4095} {
			count, size := stripes(n, socks)
			require.GreaterOrEqual(t, count, 1)
			require.LessOrEqual(t, count, socks)
			if count == 1 {
				require.Equal(t, n, size)
				continue
			}
			require.Zero(t, size%stripeAlign, "stripe size %d for n=%d", size, n)
			require.GreaterOrEqual(t, size, minStripe)
			last := n - (count-1)*size
			require.Greater(t, last, 0, "n=%d socks=%d: empty last stripe", n, socks)
			require.LessOrEqual(t, last, size)
		}
	}
	count, _ := stripes(2*minStripe-1, 4)
	require.Equal(t, 1, count, "a frame under two minimum stripes stays whole")
	count, _ = stripes(1<<20, 4)
	require.Equal(t, 4, count)
}

// Frames of awkward sizes go both ways at once, in sequence, with headers that
// differ per frame; every byte must arrive in place.
func TestStripedRoundTrip(t *testing.T) {
	sizes := []int{0, 1, 4095, transport.SmallFrame + 1, 2*minStripe - 1, 2 * minStripe, 2*minStripe + 1,
		1<<20 + 13, 3*pieceSize*4 + 4097}
	layouts := []struct{ socks, threads int }{{2, 1}, {2, 2}, {4, 1}, {4, 2}, {4, 4}, {5, 3}}
	for kind, mk := range connKinds {
		for _, lay := range layouts {
			t.Run(fmt.Sprintf("%s/%dsocks/%dthreads", kind, lay.socks, lay.threads), func(t *testing.T) {
				a, b := stripedPair(t, mk, lay.socks, lay.threads)
				rng := rand.New(rand.NewSource(int64(lay.socks*10 + lay.threads)))
				dl := time.Now().Add(20 * time.Second)
				for i, n := range sizes {
					h := transport.Header{Seq: uint64(i + 1), Kind: 3, DType: 7, Op: 0, Algo: 1, Root: -1, Count: uint64(n), Offset: uint64(7 * i)}
					ab, ba := randomBytes(rng, n), randomBytes(rng, n)
					gotAB, gotBA := make([]byte, n), make([]byte, n)
					errc := make(chan error, 3)
					sent := h
					sent.Flags = byte(1 + i%2) // not part of the match: handed back to the receiver
					wantA, wantB := h, h
					go func() { errc <- a.Send(&sent, ab, dl) }()
					go func() { errc <- b.Send(&sent, ba, dl) }()
					go func() { errc <- a.Recv(&wantA, gotBA, dl) }()
					require.NoError(t, b.Recv(&wantB, gotAB, dl), "size %d", n)
					for j := 0; j < 3; j++ {
						require.NoError(t, <-errc, "size %d", n)
					}
					require.Equal(t, sent.Flags, wantA.Flags, "size %d", n)
					require.Equal(t, sent.Flags, wantB.Flags, "size %d", n)
					require.Equal(t, ab, gotAB, "size %d a->b", n)
					require.Equal(t, ba, gotBA, "size %d b->a", n)
				}
			})
		}
	}
}

// Each stripe really travels on its own connection and carries its offset: read the
// raw connections of a striped sender.
func TestStripedWireFormat(t *testing.T) {
	ca, cb := tcpConns(t, 4)
	a, err := NewStripedLink(1, ca, 2)
	require.NoError(t, err)
	defer a.Close()
	n := 1<<20 + 3
	p := randomBytes(rand.New(rand.NewSource(1)), n)
	h := transport.Header{Seq: 9, Kind: 1, DType: 7, Root: -1, Count: uint64(n), Offset: 100}
	errc := make(chan error, 1)
	go func() { errc <- a.Send(&h, p, time.Now().Add(10*time.Second)) }()
	count, size := stripes(n, 4)
	require.Equal(t, 4, count)
	for s := 0; s < count; s++ {
		var hb [transport.HeaderSize]byte
		_, err := readFull(cb[s], hb[:])
		require.NoError(t, err)
		got, err := transport.DecodeHeader(hb[:])
		require.NoError(t, err)
		want := h
		want.Len = uint32(n)
		require.Equal(t, want, got, "connection %d carries the whole frame's header", s)
		lo := s * size
		require.Equal(t, uint32(lo), uint32(hb[40])|uint32(hb[41])<<8|uint32(hb[42])<<16|uint32(hb[43])<<24)
		part := make([]byte, min(lo+size, n)-lo)
		_, err = readFull(cb[s], part)
		require.NoError(t, err)
		require.Equal(t, p[lo:lo+len(part)], part)
	}
	require.NoError(t, <-errc)
	for _, c := range cb {
		c.Close()
	}
}

func readFull(c net.Conn, p []byte) (int, error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n := 0
	for n < len(p) {
		m, err := c.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// A peer running a different operation is reported as a mismatch naming its whole
// frame (not a stripe of it), promptly, whether the frames are striped or not; the
// direction then refuses further frames.
func TestStripedMismatch(t *testing.T) {
	cases := []struct {
		name       string
		sent, want int
		count      uint64 // the sender's Count, if it differs
	}{
		{"small vs small", 16, 32, 0},
		{"striped vs small", 1 << 20, 4096, 0},
		{"small vs striped", 4096, 1 << 20, 0},
		{"striped vs striped", 1 << 20, 1<<20 + 4096, 0},
		{"same size, other count", 1 << 20, 1 << 20, 12345},
	}
	for kind, mk := range connKinds {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				a, b := stripedPair(t, mk, 4, 2)
				want := transport.Header{Seq: 1, Kind: 1, DType: 7, Root: -1, Count: uint64(c.want / 4)}
				sent := want
				sent.Count = uint64(c.sent / 4)
				if c.count != 0 {
					sent.Count = c.count
				}
				start := time.Now()
				dl := start.Add(20 * time.Second)
				go func() { _ = a.Send(&sent, make([]byte, c.sent), dl) }()
				err := b.Recv(&want, make([]byte, c.want), dl)
				require.Less(t, time.Since(start), 5*time.Second, "mismatch was not detected promptly")
				var me *transport.MismatchError
				require.ErrorAs(t, err, &me)
				require.ErrorIs(t, err, transport.ErrMismatch)
				require.Equal(t, 0, me.Peer)
				require.Equal(t, uint32(c.sent), me.Got.Len)
				require.Equal(t, sent.Count, me.Got.Count)
				require.Equal(t, uint32(c.want), me.Want.Len)
				require.Equal(t, err, b.Recv(&want, make([]byte, c.want), dl), "the direction is out of step")
			})
		}
	}
}

// One connection of the peer dies in the middle of a striped frame: the receiver's
// threads blocked on the other connections stop at once and the frame fails with
// ErrPeerClosed, long before the deadline.
func TestStripedPeerDeathOnOneSocket(t *testing.T) {
	for kind, mk := range connKinds {
		for _, threads := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/%dthreads", kind, threads), func(t *testing.T) {
				ca, cb := mk(t, 4)
				b, err := NewStripedLink(0, cb, threads)
				require.NoError(t, err)
				defer b.Close()
				defer func() {
					for _, c := range ca {
						c.Close()
					}
				}()
				// The peer writes the header of stripe 0 and then loses connection 2.
				n := 4 << 20
				h := transport.Header{Seq: 1, Kind: 1, DType: 7, Root: -1, Count: uint64(n / 4)}
				go func() {
					var hb [transport.HeaderSize]byte
					transport.EncodeHeader(hb[:], &h, uint32(n))
					_, _ = ca[0].Write(hb[:])
					ca[2].Close()
				}()
				start := time.Now()
				err = b.Recv(&h, make([]byte, n), start.Add(30*time.Second))
				require.ErrorIs(t, err, transport.ErrPeerClosed)
				require.Less(t, time.Since(start), 5*time.Second)
			})
		}
	}
}

// The sender loses one of its own connections mid-frame: its Send fails at once, and
// so does the receiver's Recv.
func TestStripedSenderLosesSocket(t *testing.T) {
	a, b := stripedPair(t, tcpConns, 4, 2)
	n := 32 << 20
	h := transport.Header{Seq: 1, Kind: 1, DType: 7, Root: -1, Count: uint64(n / 4)}
	dl := time.Now().Add(30 * time.Second)
	a.conns[3].Close()
	start := time.Now()
	recvErr := make(chan error, 1)
	go func() { recvErr <- b.Recv(&h, make([]byte, n), dl) }()
	require.ErrorIs(t, a.Send(&h, make([]byte, n), dl), transport.ErrPeerClosed)
	require.ErrorIs(t, <-recvErr, transport.ErrPeerClosed)
	require.Less(t, time.Since(start), 5*time.Second)
}

// The whole peer dies (every connection closes) while this side waits for a small
// frame, or sends a large one.
func TestStripedPeerDeath(t *testing.T) {
	a, b := stripedPair(t, tcpConns, 4, 2)
	dl := time.Now().Add(30 * time.Second)
	go func() {
		time.Sleep(50 * time.Millisecond)
		a.Close()
	}()
	start := time.Now()
	require.ErrorIs(t, b.Recv(&transport.Header{}, make([]byte, 8), dl), transport.ErrPeerClosed)
	require.ErrorIs(t, b.Send(&transport.Header{}, make([]byte, 64<<20), dl), transport.ErrPeerClosed)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestStripedTimeoutFailAndClose(t *testing.T) {
	_, b := stripedPair(t, pipeConns, 4, 4)
	err := b.Recv(&transport.Header{}, make([]byte, 1<<20), time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, transport.ErrTimeout)

	// Fail: receiving stops at once; a send within the grace period still goes out.
	a, b := stripedPair(t, tcpConns, 4, 2)
	a.Fail(5 * time.Second)
	require.ErrorIs(t, a.Recv(&transport.Header{}, nil, time.Now().Add(time.Second)), transport.ErrPeerClosed)
	h := transport.Header{Seq: 2, Count: 1 << 18}
	p := make([]byte, 1<<20)
	recvErr := make(chan error, 1)
	go func() { recvErr <- b.Recv(&h, make([]byte, 1<<20), time.Now().Add(5*time.Second)) }()
	require.NoError(t, a.Send(&h, p, time.Now().Add(5*time.Second)))
	require.NoError(t, <-recvErr)

	// Close ends the helper goroutines.
	before := runtime.NumGoroutine()
	links := make([]*StripedLink, 0, 4)
	for i := 0; i < 2; i++ {
		x, y := stripedPair(t, pipeConns, 8, 4)
		links = append(links, x, y)
	}
	require.Greater(t, runtime.NumGoroutine(), before)
	for _, l := range links {
		l.Close()
	}
	// (not require.Eventually: it runs the condition on goroutines of its own)
	for end := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before)
	require.ErrorIs(t, links[0].Send(&transport.Header{}, nil, time.Now().Add(time.Second)), transport.ErrPeerClosed)
}

func TestNewStripedLinkRejectsBadLayouts(t *testing.T) {
	ca, _ := pipeConns(t, 2)
	_, err := NewStripedLink(1, ca, 3)
	require.ErrorContains(t, err, "3 threads for 2 connections")
	_, err = NewStripedLink(1, nil, 1)
	require.Error(t, err)
	many, _ := pipeConns(t, MaxSockets+1)
	_, err = NewStripedLink(1, many, 1)
	require.ErrorContains(t, err, "connections")
}

// Moving frames allocates nothing on the Go heap, striped or not.
func TestStripedDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	a, b := stripedPair(t, tcpConns, 4, 2)
	requireNoAllocs(t, a, b, 64, 4<<20)
}

func BenchmarkStripedTCP(b *testing.B) {
	for _, lay := range []struct{ socks, threads int }{{1, 1}, {2, 1}, {2, 2}, {4, 2}, {4, 4}} {
		for _, n := range []int{4 << 10, 512 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("%dsocks/%dthreads/%dKiB", lay.socks, lay.threads, n>>10), func(b *testing.B) {
				t := &testing.T{}
				ca, cb := tcpConns(t, lay.socks)
				x, _ := NewStripedLink(1, ca, lay.threads)
				y, _ := NewStripedLink(0, cb, lay.threads)
				defer x.Close()
				defer y.Close()
				h := transport.Header{Count: uint64(n)}
				src, dst := make([]byte, n), make([]byte, n)
				dl := time.Now().Add(time.Hour)
				errc := make(chan error, 1)
				go func() {
					for i := 0; i < b.N; i++ {
						if err := x.Send(&h, src, dl); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					if err := y.Recv(&h, dst, dl); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-errc; err != nil && !errors.Is(err, transport.ErrPeerClosed) {
					b.Fatal(err)
				}
			})
		}
	}
}
