package core

import (
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The stress test: 4 ranks in this process, 3 communicators over three kinds of link
// (TCP, shared memory, in-memory pipes) with queues of different depths, and on every
// rank 8 goroutines issuing a random script of collectives on them, synchronous and
// asynchronous; asynchronous ones are checked as they complete and waited for only at
// the end, so issuers run far ahead of the executors and block on full queues (before
// back-pressure, the third communicator deadlocked once 1,024 operations were queued). At a
// random point one rank aborts one communicator (the victim) while everything keeps
// going: the victim's operations must each finish, exact or failed, and the other two
// communicators must finish every operation exactly. At the end no goroutine is left
// behind.
//
// Operations per rank (all communicators): 50,000; -short or -race: 1,500;
// GONCCL_STRESS_OPS overrides both.

const (
	stressRanks   = 4
	stressComms   = 3
	stressIssuers = 8 // per rank; issuer g drives communicator g % stressComms
)

// stressOp is one step of a communicator's script: every rank issues the same steps in
// the same order.
type stressOp struct {
	kind  Kind
	dt    DataType
	redop RedOp
	count int
	root  int
	sync  bool // wait for it right after issuing
}

// stressScript returns n random operations, about one in syncEvery synchronous.
func stressScript(rng *rand.Rand, n, syncEvery int) []stressOp {
	kinds := []Kind{KindAllReduce, KindAllReduce, KindAllReduce, KindBroadcast, KindAllGather, KindReduceScatter, KindBarrier}
	ops := make([]stressOp, n)
	for k := range ops {
		o := stressOp{kind: kinds[rng.Intn(len(kinds))], dt: Int32, redop: []RedOp{Sum, Max, Min}[rng.Intn(3)],
			count: 1 + rng.Intn(16), root: rng.Intn(stressRanks), sync: rng.Intn(syncEvery) == 0}
		if rng.Intn(2) == 0 {
			o.dt = Float32 // small integers: sums are exact in float32 too
		}
		if rng.Intn(200) == 0 {
			o.count = 3000 + rng.Intn(3000) // chunked: ring and pipelined paths
		}
		ops[k] = o
	}
	return ops
}

// stressIn is element i of rank r's input to operation k of communicator c.
func stressIn(c, k, r, i int) float64 { return float64((k*7+r*131+i*3+c)%2001 - 1000) }

func stressReduce(op RedOp, c, k, i int) float64 {
	v := stressIn(c, k, 0, i)
	for r := 1; r < stressRanks; r++ {
		w := stressIn(c, k, r, i)
		switch op {
		case Sum:
			v += w
		case Max:
			v = max(v, w)
		case Min:
			v = min(v, w)
		}
	}
	return v
}

// issue issues operation k of communicator ci on c and returns its request and a
// function that checks its result once it has finished.
func (o stressOp) issue(c *Comm, ci, k int) (*Request, func() error, error) {
	rank, es := c.Rank(), o.dt.Size()
	fill := func(n int, base int) []byte {
		b := make([]byte, n*es)
		for i := 0; i < n; i++ {
			putElem(b, o.dt, i, stressIn(ci, k, rank, base+i))
		}
		return b
	}
	expect := func(got []byte, want func(i int) float64) func() error {
		return func() error {
			for i := 0; i < len(got)/es; i++ {
				if g, w := getElem(got, o.dt, i), want(i); g != w {
					return fmt.Errorf("comm %d op #%d %v rank %d element %d: got %v, want %v", ci, k, o.kind, rank, i, g, w)
				}
			}
			return nil
		}
	}
	switch o.kind {
	case KindAllReduce:
		b := fill(o.count, 0)
		req, err := c.AllReduce(b, b, o.count, o.dt, o.redop)
		return req, expect(b, func(i int) float64 { return stressReduce(o.redop, ci, k, i) }), err
	case KindBroadcast:
		b := make([]byte, o.count*es)
		if rank == o.root {
			b = fill(o.count, 0)
		}
		req, err := c.Broadcast(b, b, o.count, o.dt, o.root)
		return req, expect(b, func(i int) float64 { return stressIn(ci, k, o.root, i) }), err
	case KindAllGather:
		out := make([]byte, stressRanks*o.count*es)
		req, err := c.AllGather(fill(o.count, 0), out, o.count, o.dt)
		return req, expect(out, func(i int) float64 { return stressIn(ci, k, i/o.count, i%o.count) }), err
	case KindReduceScatter:
		out := make([]byte, o.count*es)
		req, err := c.ReduceScatter(fill(stressRanks*o.count, 0), out, o.count, o.dt, o.redop)
		return req, expect(out, func(i int) float64 { return stressReduce(o.redop, ci, k, rank*o.count+i) }), err
	default:
		req, err := c.Barrier()
		return req, func() error { return nil }, err
	}
}

// stressTurn makes the issuers of one communicator on one rank issue its script in
// order: operation k goes out when next == k.
type stressTurn struct {
	mu   sync.Mutex
	cond *sync.Cond
	next int
}

func stressOps(t *testing.T) int {
	if s := os.Getenv("GONCCL_STRESS_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "GONCCL_STRESS_OPS")
		return n
	}
	if testing.Short() || raceEnabled {
		return 1500
	}
	return 50000
}

func TestStress(t *testing.T) {
	perRank := stressOps(t)
	seed := time.Now().UnixNano()
	if s := os.Getenv("GONCCL_STRESS_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("%d operations per rank, seed %d (GONCCL_STRESS_SEED reruns it)", perRank, seed)
	rng := rand.New(rand.NewSource(seed))
	before := goroutineSnapshot()

	// Three communicators: TCP with a queue of 8, shared memory with 64, in-memory
	// pipes with the default 1024.
	comms := make([][]*Comm, stressComms) // [communicator][rank]
	t.Setenv("GONCCL_SHM_DISABLE", "1")
	t.Setenv("GONCCL_QUEUE_DEPTH", "8")
	comms[0] = initAllTimeout(t, stressRanks, 60*time.Second)
	t.Setenv("GONCCL_SHM_DISABLE", "0")
	t.Setenv("GONCCL_QUEUE_DEPTH", "64")
	comms[1] = initAllTimeout(t, stressRanks, 60*time.Second)
	comms[2] = memP2P(t, stressRanks)

	// Synchronous operations keep the issuers of a communicator close to its executor;
	// the third communicator has almost none, so thousands queue up there.
	scripts := make([][]stressOp, stressComms)
	for ci, syncEvery := range []int{8, 100, 5000} {
		scripts[ci] = stressScript(rng, perRank/stressComms, syncEvery)
	}
	victim, abortRank := rng.Intn(stressComms), rng.Intn(stressRanks)
	abortAt := rng.Intn(len(scripts[victim]))
	t.Logf("rank %d aborts communicator %d at its operation #%d", abortRank, victim, abortAt)

	turns := make([][]*stressTurn, stressComms)
	for ci := range turns {
		turns[ci] = make([]*stressTurn, stressRanks)
		for r := range turns[ci] {
			tr := &stressTurn{}
			tr.cond = sync.NewCond(&tr.mu)
			turns[ci][r] = tr
		}
	}
	var (
		failMu    sync.Mutex
		failures  []error
		pending   sync.WaitGroup // asynchronous operations not yet checked
		victimErr atomic.Int64   // victim operations that failed (allowed)
		done      atomic.Int64
	)
	fail := func(err error) {
		failMu.Lock()
		if len(failures) < 20 {
			failures = append(failures, err)
		}
		failMu.Unlock()
	}
	// finished checks one finished operation of communicator ci.
	finished := func(ci, k int, err error, check func() error) {
		done.Add(1)
		switch {
		case err != nil && ci == victim:
			victimErr.Add(1)
		case err != nil:
			fail(fmt.Errorf("comm %d op #%d: %w", ci, k, err))
		default:
			if cerr := check(); cerr != nil {
				fail(cerr)
			}
		}
	}
	var aborted sync.WaitGroup
	var issuers sync.WaitGroup
	for r := 0; r < stressRanks; r++ {
		for g := 0; g < stressIssuers; g++ {
			ci := g % stressComms
			mine, stride := g/stressComms, (stressIssuers-ci+stressComms-1)/stressComms
			issuers.Add(1)
			go func() {
				defer issuers.Done()
				c, tr, script := comms[ci][r], turns[ci][r], scripts[ci]
				for k := mine; k < len(script); k += stride {
					tr.mu.Lock()
					for tr.next != k {
						tr.cond.Wait()
					}
					tr.mu.Unlock()
					if ci == victim && r == abortRank && k == abortAt {
						aborted.Add(1)
						go func() {
							defer aborted.Done()
							if err := c.Abort(); err != nil {
								fail(fmt.Errorf("abort: %w", err))
							}
						}()
					}
					o := script[k]
					req, check, err := o.issue(c, ci, k) // may block: full queue
					tr.mu.Lock()
					tr.next++
					tr.mu.Unlock()
					tr.cond.Broadcast()
					if err != nil {
						finished(ci, k, err, nil)
						continue
					}
					if o.sync {
						_, err := req.Wait(-1)
						finished(ci, k, err, check)
						continue
					}
					pending.Add(1)
					req.OnComplete(func(err error) {
						defer pending.Done()
						finished(ci, k, err, check)
					})
				}
			}()
		}
	}
	waitOrFail(t, &issuers, 5*time.Minute, "issuers", &done)
	waitOrFail(t, &pending, 5*time.Minute, "asynchronous operations", &done)
	aborted.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	total := 0
	for _, s := range scripts {
		total += len(s)
	}
	require.Equal(t, int64(total*stressRanks), done.Load(), "operations finished")
	t.Logf("%d operations finished; %d on the aborted communicator failed", done.Load(), victimErr.Load())
	for ci := range comms {
		for r, c := range comms[ci] {
			if ci == victim {
				require.NoError(t, c.Abort(), "abort comm %d rank %d", ci, r)
			} else {
				require.NoError(t, c.Destroy(), "destroy comm %d rank %d", ci, r)
			}
		}
	}
	requireNoGoroutineLeak(t, before, 10*time.Second)
}

// waitOrFail waits for wg, failing the test (with every goroutine's stack) if it takes
// longer than limit.
func waitOrFail(t *testing.T, wg *sync.WaitGroup, limit time.Duration, what string, done *atomic.Int64) {
	t.Helper()
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	select {
	case <-ch:
	case <-time.After(limit):
		t.Fatalf("%s still running after %v (%d operations finished); goroutines:\n%s", what, limit, done.Load(), allStacks())
	}
}

func TestGoroutineSnapshotSeesALeak(t *testing.T) {
	before := goroutineSnapshot()
	stop := make(chan struct{})
	go func() { <-stop }()
	leaked := goroutinesSince(before, time.Now().Add(100*time.Millisecond))
	close(stop)
	require.Len(t, leaked, 1)
	require.Contains(t, leaked[0], "TestGoroutineSnapshotSeesALeak")
	requireNoGoroutineLeak(t, before, 5*time.Second)
}
