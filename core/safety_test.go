package core

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
	"github.com/gonccl/gonccl/transport/tcp"
)

// A panic on any goroutine gonccl starts fails the operation it served (or the
// link, or the communicator) with an error naming it, and the process lives on: each
// case injects a panic at one site, on rank 0 only, through the test hook
// (config.injectPanic), runs an operation on every rank and checks that
//   - rank 0's operation fails with the panic's message (and ErrInternal),
//   - every rank's operation finishes (an error or not: no hang),
//   - a later call on rank 0 fails cleanly, again naming the panic,
//   - Abort still returns.
// The test process surviving is the proof that the panic was recovered.

// onRank0 returns a tweak that makes rank 0's site panic on its first pass (tweak is
// called once per rank, in rank order).
func onRank0(site string, more func(*config)) func(*config) {
	calls := 0
	return func(c *config) {
		if more != nil {
			more(c)
		}
		if calls == 0 {
			c.injectPanic = panicOnPass(site, 1)
		}
		calls++
	}
}

// requirePanicErr checks that err is the injected panic at site.
func requirePanicErr(t *testing.T, err error, site, what string) {
	t.Helper()
	require.Error(t, err, what)
	require.True(t, errors.Is(err, ErrInternal), "%s: %v does not match ErrInternal", what, err)
	require.Contains(t, err.Error(), fmt.Sprintf("panic in gonccl's %s goroutine", site), what)
	require.Contains(t, err.Error(), "injected panic at "+site, what)
}

func allReduceOfN(count int) func(c *Comm) (*Request, error) {
	return func(c *Comm) (*Request, error) {
		b := make([]byte, count*4)
		return c.AllReduce(b, b, count, Float32, Sum)
	}
}

func TestPanicInCollectiveGoroutines(t *testing.T) {
	algo := func(k Kind, a Algo) func(*config) {
		return func(c *config) { c.algo[k] = []Algo{a}; c.llThreshold = 1 << 20 }
	}
	reduceScatter := func(c *Comm) (*Request, error) {
		b := make([]byte, 4096*4*c.nranks)
		return c.ReduceScatter(b, b[:4096*4], 4096, Float32, Sum)
	}
	shm := func(t testing.TB, n int, tweak func(*config)) []*Comm { return shmComms(t, n, 1<<16, tweak) }
	for _, tc := range []struct {
		site  string
		comms func(t testing.TB, n int, tweak func(*config)) []*Comm
		n     int
		tweak func(*config)
		op    func(c *Comm) (*Request, error)
	}{
		{"executor", memComms, 3, nil, allReduceOfN(1024)},
		{"collective", memComms, 3, nil, allReduceOfN(1024)},
		{"pipeline sender", memComms, 3, algo(KindAllReduce, AlgoRing), allReduceOfN(8192)},
		{"sendrecv sender", memComms, 2, algo(KindAllReduce, AlgoRecDoubling), allReduceOfN(64)},
		{"direct sender", shm, 3, algo(KindAllReduce, AlgoDirect), allReduceOfN(64)},
		{"window sender", memComms, 3, nil, reduceScatter},
	} {
		t.Run(tc.site, func(t *testing.T) {
			comms := tc.comms(t, tc.n, onRank0(tc.site, tc.tweak))
			if tc.site == "executor" {
				// Waiters run operations themselves while the executor is idle (inline.go):
				// the executor's death shows once it has broken the communicator.
				require.Eventually(t, func() bool { return comms[0].Err() != nil }, 10*time.Second, time.Millisecond)
			}
			errs := onAll(t, comms, tc.op)
			requirePanicErr(t, errs[0], tc.site, "rank 0's operation")
			for r, err := range errs[1:] {
				require.NotContains(t, fmt.Sprint(err), "did not finish", "rank %d", r+1)
			}
			// Later calls fail at once, naming what broke the communicator.
			req, err := tc.op(comms[0])
			if err == nil {
				_, err = waitErr(t, req)
			}
			requirePanicErr(t, err, tc.site, "a later operation on rank 0")
			require.Contains(t, err.Error(), "failed earlier")
			for _, c := range comms {
				require.NoError(t, c.Abort())
			}
		})
	}
}

// waitErr waits for req (bounded) and returns whether it finished and its error.
func waitErr(t *testing.T, req *Request) (bool, error) {
	t.Helper()
	done, err := req.Wait(30 * time.Second)
	require.True(t, done, "request did not finish")
	return done, err
}

// An op hook (device staging's After) that panics fails its operation only.
func TestPanicInOpHook(t *testing.T) {
	comms := memComms(t, 2, onRank0("op hook", nil))
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		b := make([]byte, 64)
		return c.AllReduce(b, b, 16, Float32, Sum, WithHooks(Hooks{After: func(error) error { return nil }}))
	})
	requirePanicErr(t, errs[0], "op hook", "rank 0's operation")
	require.NoError(t, errs[1])
	require.NoError(t, onAll(t, comms, allReduceOfN(16))[0], "the communicator still works")
}

func TestPanicInPointToPointGoroutines(t *testing.T) {
	const n = 1000
	for _, site := range []string{"p2p reader", "p2p writer", "heartbeat"} {
		t.Run(site, func(t *testing.T) {
			comms := memP2PWith(t, 2, onRank0(site, func(c *config) {
				c.heartbeatTimeout = 10 * time.Second
			}))
			// The panic happens as the goroutines start; rank 0's channel to rank 1 is
			// failed with it (at once: no data needed).
			var err error
			require.Eventually(t, func() bool {
				_, err = comms[0].Send(make([]byte, n), n, Uint8, 1, 0)
				return err != nil
			}, 10*time.Second, 10*time.Millisecond, "rank 0's channel never failed")
			requirePanicErr(t, err, site, "a send on rank 0")
			_, err = comms[0].Recv(make([]byte, n), n, Uint8, 1, 0)
			requirePanicErr(t, err, site, "a receive on rank 0")
			// Rank 1 learns that its peer's channel is gone rather than hanging (a tag
			// rank 0 never sent with).
			r, err := comms[1].Recv(make([]byte, n), n, Uint8, 0, 99)
			if err == nil {
				_, err = waitErr(t, r)
			}
			require.Error(t, err, "rank 1's receive from rank 0")
			if site == "heartbeat" { // the communicator failed as a whole
				_, err := waitErr(t, mustReq(comms[0].AllReduce(make([]byte, 4), make([]byte, 4), 1, Float32, Sum)))
				requirePanicErr(t, err, site, "a collective on rank 0")
			}
		})
	}
	for _, site := range []string{"p2p send timer", "p2p recv timer"} {
		t.Run(site, func(t *testing.T) {
			comms := memP2PWith(t, 2, onRank0(site, func(c *config) { c.timeout = 200 * time.Millisecond }))
			// An operation nobody matches: its deadline timer fires and panics.
			var req *Request
			var err error
			if site == "p2p send timer" {
				req, err = comms[0].Send(make([]byte, 1<<20), 1<<20, Uint8, 1, 7)
			} else {
				req, err = comms[0].Recv(make([]byte, n), n, Uint8, 1, 7)
			}
			require.NoError(t, err)
			_, err = waitErr(t, req)
			requirePanicErr(t, err, site, "the timed operation")
			_, err = comms[0].Send(make([]byte, n), n, Uint8, 1, 0)
			requirePanicErr(t, err, site, "a later send on rank 0")
		})
	}
}

func mustReq(r *Request, err error) *Request {
	if err != nil {
		r = newRequest()
		r.complete(err)
	}
	return r
}

// Transport goroutines: a shared-memory link's watcher and a striped TCP link's helper.
func TestPanicInLinkGoroutines(t *testing.T) {
	inject := func(site string) safego.Guard {
		return safego.Guard{Inject: panicOnPass(site, 1)}
	}
	for _, tc := range []struct {
		site string
		pair func(i, j int) (transport.Link, transport.Link)
	}{
		{"shm watcher", func(i, j int) (transport.Link, transport.Link) {
			ca, cb := net.Pipe()
			dl := time.Now().Add(10 * time.Second)
			var a *shm.Link
			var errA error
			done := make(chan struct{})
			go func() {
				defer close(done)
				g := safego.Guard{}
				if i == 0 {
					g = inject("shm watcher")
				}
				a, errA = shm.Connect(ca, j, true, 1<<16, dl, g)
			}()
			b, errB := shm.Connect(cb, i, false, 1<<16, dl)
			<-done
			require.NoError(t, errA)
			require.NoError(t, errB)
			return a, b
		}},
		{"tcp link sender", stripedPair(t, inject("tcp link sender"))},
		{"tcp link stripe", stripedPair(t, inject("tcp link stripe"))},
	} {
		t.Run(tc.site, func(t *testing.T) {
			comms := commsOver(t, 2, func(c *config) { c.chunkBytes = 1 << 20; c.algo[KindAllReduce] = []Algo{AlgoRing} }, tc.pair)
			errs := onAll(t, comms, allReduceOfN(1<<20))
			var failed error
			t.Logf("errors: %v", errs)
			for _, err := range errs {
				if err != nil && strings.Contains(err.Error(), "injected panic") {
					failed = err
				}
			}
			requirePanicErr(t, failed, tc.site, "an all_reduce over the link")
			_, err := waitErr(t, mustReq(allReduceOfN(16)(comms[0])))
			requirePanicErr(t, err, tc.site, "a later all_reduce")
		})
	}
}

// stripedPair joins ranks 0 and 1 with striped links of 2 connections and 2 sending
// goroutines, rank 0's under g.
func stripedPair(t *testing.T, g safego.Guard) func(i, j int) (transport.Link, transport.Link) {
	return func(i, j int) (transport.Link, transport.Link) {
		var ca, cb []net.Conn
		for k := 0; k < 2; k++ {
			a, b := net.Pipe()
			ca, cb = append(ca, a), append(cb, b)
		}
		a, err := tcp.NewStripedLink(j, ca, 2, g)
		require.NoError(t, err)
		b, err := tcp.NewStripedLink(i, cb, 2)
		require.NoError(t, err)
		return a, b
	}
}

// Init's goroutines: the bootstrap root's and the peer connections'. Init
// fails on every rank (the injected rank with the panic's message), within its
// timeout, and a later init in the same process succeeds.
func TestPanicInBootstrapGoroutines(t *testing.T) {
	sites := []string{"bootstrap root", "bootstrap root accept", "bootstrap root join",
		"init connect", "peer dial", "peer accept", "peer handshake"}
	t.Run("sites", func(t *testing.T) {
		for _, site := range sites {
			bootstrapPanic(t, site)
		}
	})
	t.Run("later init works", func(t *testing.T) {
		initAll(t, 2)
	})
}

func bootstrapPanic(t *testing.T, site string) {
	const n = 2
	t.Run(site, func(t *testing.T) {
		t.Parallel()
		root := strings.HasPrefix(site, "bootstrap root")
		var fired atomic.Bool
		hook := func(s string) {
			if s == site && fired.CompareAndSwap(false, true) {
				panic("injected panic at " + site + " (test hook)")
			}
		}
		var rootHooks *testHooks
		if root {
			rootHooks = &testHooks{injectPanic: hook}
		}
		id, err := newUniqueID(rootHooks)
		require.NoError(t, err)
		comms := make([]*Comm, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := 0; r < n; r++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				opts := Options{Timeout: 3 * time.Second}
				// Rank 1 dials, rank 0 accepts: put the panic where the site runs.
				if !root && (r == 1) == (site == "peer dial" || site == "init connect") {
					opts.test = &testHooks{injectPanic: hook}
				}
				comms[r], errs[r] = NewComm(id, n, r, opts)
			}()
		}
		wg.Wait()
		for _, c := range comms {
			if c != nil {
				_ = c.Abort()
			}
		}
		require.True(t, fired.Load(), "the site never ran")
		for r := range errs {
			require.Error(t, errs[r], "rank %d's init", r)
		}
		if root {
			// The root runs apart from the ranks (often in another process): they see
			// it go away, not its panic, which it logs (see package safego's tests).
			return
		}
		found := false
		for _, err := range errs {
			if err != nil && strings.Contains(err.Error(), "panic in gonccl's "+site+" goroutine") {
				found = true
			}
		}
		require.True(t, found, "no rank's init error names the panic: %v", errs)
	})
}
