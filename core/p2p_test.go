package core

import (
	"bytes"
	"fmt"
	"math/rand"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/gonccl/internal/testtime"
	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// wait waits for req and returns its error, failing the test if it does not finish.
func wait(t *testing.T, req *Request, what string) error {
	t.Helper()
	done, err := req.Wait(30 * time.Second)
	require.True(t, done, "%s did not finish", what)
	return err
}

// pattern returns n bytes that depend on seed.
func pattern(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// onRanks runs fn on every rank concurrently and returns the errors.
func onRanks(comms []*Comm, fn func(c *Comm) error) []error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(c)
		}()
	}
	wg.Wait()
	return errs
}

func destroyAll(t *testing.T, comms []*Comm) {
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
}

// Both ranks send first and receive second, with messages far larger than any socket
// buffer: this deadlocks if sends wait for their receive, or if receiving depends on
// the executor.
func TestP2PSymmetricLarge(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	symmetric(t, comms, 32<<20)
}

func TestP2PSymmetricOverPipes(t *testing.T) {
	symmetric(t, memP2P(t, 2), 4<<20)
}

// memP2P builds n in-memory communicators with point-to-point channels over net.Pipe
// (unbuffered: a protocol step that relies on buffering deadlocks here).
func memP2P(t *testing.T, n int) []*Comm { return memP2PWith(t, n, nil) }

// memP2PWith is memP2P with a config tweak (see memComms).
func memP2PWith(t *testing.T, n int, tweak func(*config)) []*Comm {
	comms := memComms(t, n, tweak)
	msgs := make([][]*transport.MsgConn, n)
	for i := range msgs {
		msgs[i] = make([]*transport.MsgConn, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := net.Pipe()
			msgs[i][j] = transport.NewMsgConn(j, a)
			msgs[j][i] = transport.NewMsgConn(i, b)
		}
	}
	for i, c := range comms {
		c.startP2P(msgs[i])
	}
	return comms
}

func symmetric(t *testing.T, comms []*Comm, n int) {
	errs := onRanks(comms, func(c *Comm) error {
		peer := 1 - c.rank
		out := pattern(n, int64(c.rank))
		in := make([]byte, n)
		s, err := c.Send(out, n, Uint8, peer, 0)
		if err != nil {
			return err
		}
		r, err := c.Recv(in, n, Uint8, peer, 0)
		if err != nil {
			return err
		}
		if err := wait(t, s, "send"); err != nil {
			return err
		}
		if err := wait(t, r, "recv"); err != nil {
			return err
		}
		if !bytes.Equal(in, pattern(n, int64(peer))) {
			return fmt.Errorf("rank %d: wrong data from rank %d", c.rank, peer)
		}
		if r.Source() != peer || s.Source() != peer {
			return fmt.Errorf("sources %d %d", r.Source(), s.Source())
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// Every rank sends to the next and receives from the previous, in both call orders and
// with sizes on both sides of the eager limit.
func TestP2PRing(t *testing.T) {
	for n := 2; n <= 6; n++ {
		comms := initAll(t, n)
		for _, size := range []int{0, 5, p2pEagerBytes, p2pEagerBytes + 1, 3 << 20} {
			for _, recvFirst := range []bool{false, true} {
				errs := onRanks(comms, func(c *Comm) error {
					next, prev := (c.rank+1)%n, (c.rank+n-1)%n
					out, in := pattern(size, int64(c.rank)), make([]byte, size)
					var s, r *Request
					var err error
					if recvFirst {
						r, err = c.Recv(in, size, Uint8, prev, 7)
					} else {
						s, err = c.Send(out, size, Uint8, next, 7)
					}
					if err != nil {
						return err
					}
					if recvFirst {
						s, err = c.Send(out, size, Uint8, next, 7)
					} else {
						r, err = c.Recv(in, size, Uint8, prev, 7)
					}
					if err != nil {
						return err
					}
					if err := wait(t, s, "send"); err != nil {
						return err
					}
					if err := wait(t, r, "recv"); err != nil {
						return err
					}
					if !bytes.Equal(in, pattern(size, int64(prev))) {
						return fmt.Errorf("rank %d: wrong data from rank %d", c.rank, prev)
					}
					return nil
				})
				for r, err := range errs {
					require.NoError(t, err, "n=%d size=%d recvFirst=%v rank %d", n, size, recvFirst, r)
				}
			}
		}
		destroyAll(t, comms)
	}
}

// Many outstanding tagged messages, received in reverse tag order, small and large:
// each tag's receive takes its own message whatever arrived first.
func TestP2PReverseTagOrder(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	reverseTags(t, comms)
}

func TestP2PReverseTagOrderOverPipes(t *testing.T) {
	reverseTags(t, memP2P(t, 2))
}

func reverseTags(t *testing.T, comms []*Comm) {
	const k = 40
	size := func(tag int) int { return 1 + tag*(p2pEagerBytes/8) } // eager and rendezvous
	errs := onRanks(comms, func(c *Comm) error {
		peer := 1 - c.rank
		var reqs []*Request
		for tag := 0; tag < k; tag++ {
			s, err := c.Send(pattern(size(tag), int64(100*c.rank+tag)), size(tag), Uint8, peer, tag)
			if err != nil {
				return err
			}
			reqs = append(reqs, s)
		}
		time.Sleep(50 * time.Millisecond) // let the eager ones arrive unexpected
		ins := make([][]byte, k)
		for tag := k - 1; tag >= 0; tag-- {
			ins[tag] = make([]byte, size(tag))
			r, err := c.Recv(ins[tag], size(tag), Uint8, peer, tag)
			if err != nil {
				return err
			}
			reqs = append(reqs, r)
		}
		for _, r := range reqs {
			if err := wait(t, r, "request"); err != nil {
				return err
			}
		}
		for tag := 0; tag < k; tag++ {
			if !bytes.Equal(ins[tag], pattern(size(tag), int64(100*peer+tag))) {
				return fmt.Errorf("rank %d: tag %d: wrong data", c.rank, tag)
			}
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// Messages with one tag between one pair arrive in send order.
func TestP2PSameTagKeepsOrder(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	const k = 30
	errs := onRanks(comms, func(c *Comm) error {
		if c.rank == 0 {
			for i := 0; i < k; i++ {
				n := 8 + (i%3)*p2pEagerBytes // interleave eager and rendezvous
				if _, err := c.Send(pattern(n, int64(i)), n, Uint8, 1, 3); err != nil {
					return err
				}
			}
			return nil
		}
		for i := 0; i < k; i++ {
			n := 8 + (i%3)*p2pEagerBytes
			in := make([]byte, n)
			r, err := c.Recv(in, n, Uint8, 0, 3)
			if err != nil {
				return err
			}
			if err := wait(t, r, "recv"); err != nil {
				return err
			}
			if !bytes.Equal(in, pattern(n, int64(i))) {
				return fmt.Errorf("message %d out of order", i)
			}
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func TestP2PAnySource(t *testing.T) {
	const n = 4
	comms := initAll(t, n)
	defer destroyAll(t, comms)
	for _, size := range []int{16, 2 * p2pEagerBytes} {
		errs := onRanks(comms, func(c *Comm) error {
			if c.rank != 0 {
				time.Sleep(time.Duration(c.rank) * 20 * time.Millisecond)
				s, err := c.Send(pattern(size, int64(c.rank)), size/4, Float32, 0, 9)
				if err != nil {
					return err
				}
				return wait(t, s, "send")
			}
			seen := map[int]bool{}
			for i := 1; i < n; i++ {
				in := make([]byte, size)
				r, err := c.Recv(in, size/4, Float32, AnySource, 9)
				if err != nil {
					return err
				}
				if err := wait(t, r, "recv"); err != nil {
					return err
				}
				src := r.Source()
				if src < 1 || src >= n || seen[src] {
					return fmt.Errorf("bad source %d", src)
				}
				seen[src] = true
				if !bytes.Equal(in, pattern(size, int64(src))) {
					return fmt.Errorf("wrong data from rank %d", src)
				}
			}
			return nil
		})
		for r, err := range errs {
			require.NoError(t, err, "size %d rank %d", size, r)
		}
	}
}

// A receive of the wrong size fails naming both sizes and both ranks; a large sender
// learns of it too. The channel stays usable afterwards.
func TestP2PSizeMismatch(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	for _, n := range []int{100, 4 * p2pEagerBytes} {
		s, err := comms[0].Send(make([]byte, n), n/4, Float32, 1, 1)
		require.NoError(t, err)
		r, err := comms[1].Recv(make([]byte, 2*n), n/2, Float32, 0, 1)
		require.NoError(t, err)
		rerr := wait(t, r, "recv")
		require.ErrorIs(t, rerr, ErrMismatch)
		require.ErrorContains(t, rerr, fmt.Sprintf("rank 0 sent %d bytes", n))
		require.ErrorContains(t, rerr, fmt.Sprintf("rank 1's receive expects %d bytes", 2*n))
		serr := wait(t, s, "send")
		if n > p2pEagerBytes {
			require.ErrorIs(t, serr, ErrMismatch)
			require.ErrorContains(t, serr, fmt.Sprintf("rank 1's receive (tag 1) expects %d bytes but rank 0 sent %d bytes", 2*n, n))
		}
	}
	s, err := comms[0].Send([]byte("still fine"), 10, Uint8, 1, 2)
	require.NoError(t, err)
	in := make([]byte, 10)
	r, err := comms[1].Recv(in, 10, Uint8, 0, 2)
	require.NoError(t, err)
	require.NoError(t, wait(t, r, "recv"))
	require.NoError(t, wait(t, s, "send"))
	require.Equal(t, "still fine", string(in))
}

// Receives posted long before and long after their message arrives.
func TestP2PPostedBeforeAndAfter(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	for _, n := range []int{3, 1 << 20} {
		// before: the receive waits, then the message comes
		in := make([]byte, n)
		r, err := comms[1].Recv(in, n, Uint8, 0, 5)
		require.NoError(t, err)
		time.Sleep(30 * time.Millisecond)
		ok, _ := r.Test()
		require.False(t, ok)
		s, err := comms[0].Send(pattern(n, 1), n, Uint8, 1, 5)
		require.NoError(t, err)
		require.NoError(t, wait(t, r, "recv"))
		require.NoError(t, wait(t, s, "send"))
		require.Equal(t, pattern(n, 1), in)
		// after: the message is held (eager) or announced (rendezvous) first
		s, err = comms[0].Send(pattern(n, 2), n, Uint8, 1, 6)
		require.NoError(t, err)
		time.Sleep(30 * time.Millisecond)
		r, err = comms[1].Recv(in, n, Uint8, 0, 6)
		require.NoError(t, err)
		require.NoError(t, wait(t, r, "recv"))
		require.NoError(t, wait(t, s, "send"))
		require.Equal(t, pattern(n, 2), in)
	}
}

// Point-to-point traffic and all_reduce on one communicator, issued in different
// orders on different ranks, all finish.
func TestP2PInterleavedWithAllReduce(t *testing.T) {
	const n = 3
	comms := initAll(t, n)
	defer destroyAll(t, comms)
	const count = 1 << 18
	errs := onRanks(comms, func(c *Comm) error {
		next, prev := (c.rank+1)%n, (c.rank+n-1)%n
		var reqs []*Request
		ar := make([]byte, 4*count)
		in := make([]byte, 4*count)
		issue := []func() (*Request, error){
			func() (*Request, error) { return c.AllReduce(ar, ar, count, Float32, Sum) },
			func() (*Request, error) { return c.Send(pattern(4*count, int64(c.rank)), count, Float32, next, 0) },
			func() (*Request, error) { return c.Recv(in, count, Float32, prev, 0) },
		}
		// rank r starts at a different call: the p2p of one rank waits on nobody's
		// collective, and a collective waits on nobody's p2p.
		for i := 0; i < len(issue); i++ {
			req, err := issue[(i+c.rank)%len(issue)]()
			if err != nil {
				return err
			}
			reqs = append(reqs, req)
		}
		for _, r := range reqs {
			if err := wait(t, r, "request"); err != nil {
				return err
			}
		}
		if !bytes.Equal(in, pattern(4*count, int64(prev))) {
			return fmt.Errorf("rank %d: wrong data", c.rank)
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func TestP2PAbortFailsPendingReceive(t *testing.T) {
	comms := initAll(t, 2)
	r, err := comms[0].Recv(make([]byte, 8), 8, Uint8, 1, 0)
	require.NoError(t, err)
	big, err := comms[0].Send(make([]byte, 1<<20), 1<<20, Uint8, 1, 0)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, comms[0].Abort())
	require.ErrorIs(t, wait(t, r, "recv"), ErrAborted)
	require.ErrorIs(t, wait(t, big, "send"), ErrAborted)
	require.Less(t, time.Since(start), testtime.D(10*time.Second), "failed by the abort, not by a timeout")
	_, err = comms[0].Recv(make([]byte, 8), 8, Uint8, 1, 0)
	require.ErrorIs(t, err, ErrAborted)
	require.NoError(t, comms[1].Destroy())
}

func TestP2PPeerCloseFailsPendingReceive(t *testing.T) {
	comms := initAll(t, 3)
	r, err := comms[0].Recv(make([]byte, 8), 8, Uint8, 2, 0)
	require.NoError(t, err)
	any, err := comms[0].Recv(make([]byte, 8), 8, Uint8, AnySource, 4)
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, comms[2].Abort())
	rerr := wait(t, r, "recv")
	require.ErrorIs(t, rerr, ErrPeerClosed)
	require.ErrorContains(t, rerr, "lost rank 2")
	require.Less(t, time.Since(start), testtime.D(10*time.Second), "failed by the peer's close, not by a timeout")
	_, err = comms[0].Send([]byte{1}, 1, Uint8, 2, 0)
	require.ErrorContains(t, err, "lost rank 2")
	// an any-source receive is still satisfied by a live rank
	s, err := comms[1].Send(make([]byte, 8), 8, Uint8, 0, 4)
	require.NoError(t, err)
	require.NoError(t, wait(t, any, "any-source recv"))
	require.NoError(t, wait(t, s, "send"))
	require.Equal(t, 1, any.Source())
	require.NoError(t, comms[0].Destroy())
	require.NoError(t, comms[1].Destroy())
}

func TestP2PTimeout(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, 2, r, Options{Timeout: testtime.D(20 * time.Second)})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	for _, c := range comms {
		c.p2p.timeout = 300 * time.Millisecond // short deadlines for p2p only
	}
	defer destroyAll(t, comms)
	r, err := comms[0].Recv(make([]byte, 8), 2, Float32, 1, 0)
	require.NoError(t, err)
	s, err := comms[0].Send(make([]byte, 1<<20), 1<<20, Uint8, 1, 0)
	require.NoError(t, err)
	rerr, serr := wait(t, r, "recv"), wait(t, s, "send")
	require.ErrorIs(t, rerr, ErrTimeout)
	require.ErrorContains(t, rerr, "rank 1")
	require.ErrorIs(t, serr, ErrTimeout)
	// the late receive of the withdrawn message fails rather than hanging
	r2, err := comms[1].Recv(make([]byte, 1<<20), 1<<20, Uint8, 0, 0)
	require.NoError(t, err)
	require.ErrorIs(t, wait(t, r2, "late recv"), ErrTimeout)
}

func TestP2PInvalidArguments(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	c := comms[0]
	buf := make([]byte, 16)
	for _, tc := range []struct {
		name string
		call func() (*Request, error)
		msg  string
	}{
		{"self", func() (*Request, error) { return c.Send(buf, 1, Uint8, 0, 0) }, "is this rank"},
		{"range", func() (*Request, error) { return c.Send(buf, 1, Uint8, 2, 0) }, "out of range"},
		{"any send", func() (*Request, error) { return c.Send(buf, 1, Uint8, AnySource, 0) }, "out of range"},
		{"short", func() (*Request, error) { return c.Recv(buf, 5, Float32, 1, 0) }, "need 20"},
		{"dtype", func() (*Request, error) { return c.Recv(buf, 1, DataType(99), 1, 0) }, "unknown data type"},
		{"negative", func() (*Request, error) { return c.Send(buf, -1, Uint8, 1, 0) }, "negative count"},
	} {
		_, err := tc.call()
		require.ErrorIs(t, err, ErrInvalidArgument, tc.name)
		require.ErrorContains(t, err, tc.msg, tc.name)
	}
}

// BenchmarkP2PPingPong measures one message each way between two ranks over loopback
// TCP; bytes/s counts both directions.
func BenchmarkP2PPingPong(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20, 32 << 20} {
		b.Run(fmt.Sprintf("%dB", n), func(b *testing.B) {
			id, err := NewUniqueID()
			require.NoError(b, err)
			comms := make([]*Comm, 2)
			var wg sync.WaitGroup
			for r := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					comms[r], _ = NewComm(id, 2, r, Options{Timeout: 30 * time.Second})
				}()
			}
			wg.Wait()
			require.NotNil(b, comms[0])
			require.NotNil(b, comms[1])
			outs := [][]byte{make([]byte, n), make([]byte, n)}
			ins := [][]byte{make([]byte, n), make([]byte, n)}
			b.SetBytes(int64(2 * n))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var wg sync.WaitGroup
				for r, c := range comms {
					wg.Add(1)
					go func() {
						defer wg.Done()
						s, _ := c.Send(outs[r], n, Uint8, 1-r, 0)
						rq, _ := c.Recv(ins[r], n, Uint8, 1-r, 0)
						_, _ = s.Wait(-1)
						_, _ = rq.Wait(-1)
					}()
				}
				wg.Wait()
			}
			b.StopTimer()
			for _, c := range comms {
				require.NoError(b, c.Destroy())
			}
		})
	}
}

// Destroy and Abort stop every point-to-point goroutine.
func TestP2PGoroutinesExit(t *testing.T) {
	before := runtime.NumGoroutine()
	comms := initAll(t, 3)
	_, err := comms[0].Recv(make([]byte, 4), 4, Uint8, 1, 0)
	require.NoError(t, err)
	_, err = comms[1].Send(make([]byte, 1<<20), 1<<20, Uint8, 2, 0)
	require.NoError(t, err)
	require.NoError(t, comms[0].Abort())
	require.NoError(t, comms[1].Destroy())
	require.NoError(t, comms[2].Destroy())
	deadline := time.Now().Add(testtime.D(20 * time.Second))
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before)
}
