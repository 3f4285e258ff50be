package core

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gonccl/gonccl/internal/testtime"
	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/tcp"
)

// memComms builds n communicators joined by in-memory links (net.Pipe: unbuffered, so
// any schedule that relies on buffering deadlocks here instead of passing by luck).
func memComms(t testing.TB, n int, tweak func(*config)) []*Comm {
	t.Helper()
	return commsOver(t, n, tweak, func(i, j int) (transport.Link, transport.Link) {
		a, b := net.Pipe()
		return tcp.NewStreamLink(j, a), tcp.NewStreamLink(i, b)
	})
}

// commsOver builds n communicators in this process, joining each pair i < j with the
// links pair(i, j) returns (i's end first).
func commsOver(t testing.TB, n int, tweak func(*config), pair func(i, j int) (transport.Link, transport.Link)) []*Comm {
	t.Helper()
	links := make([][]transport.Link, n)
	for i := range links {
		links[i] = make([]transport.Link, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			links[i][j], links[j][i] = pair(i, j)
		}
	}
	comms := make([]*Comm, n)
	for i := range comms {
		cfg := &config{debug: "WARN", debugSubsys: "ALL", timeout: 20 * time.Second, chunkBytes: 4096,
			llThreshold: 256, algo: algoAllow{}, queueDepth: 1024}
		if tweak != nil {
			tweak(cfg)
		}
		c, err := newComm(i, n, cfg, newLoggers(cfg, "test", i), fixedPeers(i, links[i]), cfg.timeout)
		require.NoError(t, err)
		comms[i] = c
	}
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	})
	return comms
}

// onAll runs issue on every rank concurrently and waits for every request, as the C
// ABI's blocking calls do: without a timeout of its own (the operations' deadline
// bounds it), so that the waiters run their operations themselves (inline.go).
func onAll(t testing.TB, comms []*Comm, issue func(c *Comm) (*Request, error)) []error {
	t.Helper()
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := issue(c)
			if err != nil {
				errs[i] = err
				return
			}
			done, err := req.Wait(-1)
			if !done {
				err = fmt.Errorf("rank %d: request did not finish", i)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	return errs
}

var allTypes = []DataType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16}
var allOps = []RedOp{Sum, Prod, Max, Min, Avg}

// getElem and putElem read and write element i as float64 (floats) or as the integer's
// bits sign-extended into an int64 (integers).
func getElem(b []byte, dt DataType, i int) float64 {
	switch dt {
	case Int8:
		return float64(int8(b[i]))
	case Uint8:
		return float64(b[i])
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b[4*i:])))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b[4*i:]))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b[8*i:])))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b[8*i:]))
	case Float16:
		return float64(Float16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
	case Bfloat16:
		return float64(Bfloat16ToFloat32(binary.LittleEndian.Uint16(b[2*i:])))
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	panic(dt)
}

func putElem(b []byte, dt DataType, i int, v float64) {
	switch dt {
	case Int8, Uint8:
		b[i] = byte(int64(v))
	case Int32, Uint32:
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int64(v)))
	case Int64, Uint64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(int64(v)))
	case Float16:
		binary.LittleEndian.PutUint16(b[2*i:], Float32ToFloat16(float32(v)))
	case Bfloat16:
		binary.LittleEndian.PutUint16(b[2*i:], Float32ToBfloat16(float32(v)))
	case Float32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case Float64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
}

// getInt reads integer element i exactly, as int64 bits.
func getInt(b []byte, dt DataType, i int) int64 {
	switch dt {
	case Int64, Uint64:
		return int64(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return int64(getElem(b, dt, i))
}

func putInt(b []byte, dt DataType, i int, v int64) {
	switch dt {
	case Int64, Uint64:
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	default:
		putElem(b, dt, i, float64(v))
	}
}

// wrapInt truncates v to dt's width the way integer arithmetic in dt wraps.
func wrapInt(dt DataType, v int64) int64 {
	switch dt {
	case Int8:
		return int64(int8(v))
	case Uint8:
		return int64(uint8(v))
	case Int32:
		return int64(int32(v))
	case Uint32:
		return int64(uint32(v))
	}
	return v
}

// inputs makes rank r's input: values chosen so every reduction is exact whatever the
// order (small integers; for products only +-1 and +-2), so results compare exactly.
func inputs(dt DataType, op RedOp, count, rank int, seed int64) []byte {
	rng := rand.New(rand.NewSource(seed*1000 + int64(rank)))
	b := make([]byte, count*dt.Size())
	for i := 0; i < count; i++ {
		var v float64
		switch {
		case op == Prod && dt.IsFloat():
			v = []float64{-2, -1, 1, 2}[rng.Intn(4)]
		case dt.IsFloat():
			v = float64(rng.Intn(9) - 4)
		case dt == Uint8 || dt == Uint32 || dt == Uint64:
			v = float64(rng.Intn(250))
		default:
			v = float64(rng.Intn(250) - 125)
		}
		putElem(b, dt, i, v)
	}
	return b
}

// reference reduces the ranks' inputs element by element, the simple way.
func reference(dt DataType, op RedOp, ins [][]byte, count int) []byte {
	out := make([]byte, count*dt.Size())
	n := len(ins)
	for i := 0; i < count; i++ {
		if dt.IsFloat() {
			acc := getElem(ins[0], dt, i)
			for _, in := range ins[1:] {
				v := getElem(in, dt, i)
				switch op {
				case Sum, Avg:
					acc += v
				case Prod:
					acc *= v
				case Max:
					acc = math.Max(acc, v)
				case Min:
					acc = math.Min(acc, v)
				}
			}
			if op == Avg {
				acc /= float64(n)
			}
			putElem(out, dt, i, acc)
			continue
		}
		acc := getInt(ins[0], dt, i)
		for _, in := range ins[1:] {
			v := getInt(in, dt, i)
			switch op {
			case Sum, Avg:
				acc = wrapInt(dt, acc+v)
			case Prod:
				acc = wrapInt(dt, acc*v)
			case Max:
				acc = intMax(dt, acc, v)
			case Min:
				if intMax(dt, acc, v) == acc {
					acc = v
				}
			}
		}
		if op == Avg {
			if dt == Uint64 {
				acc = int64(uint64(acc) / uint64(n))
			} else {
				acc /= int64(n)
			}
		}
		putInt(out, dt, i, acc)
	}
	return out
}

// allReduceFloat32 sums count float32s (rank r's are inputs(Float32, Sum, count, r,
// seed)) across comms with AllReduce, and returns each rank's error and result and
// the exact sum they must equal.
func allReduceFloat32(t testing.TB, comms []*Comm, count int, seed int64) (errs []error, outs [][]byte, want []byte) {
	t.Helper()
	ins := make([][]byte, len(comms))
	outs = make([][]byte, len(comms))
	for r := range ins {
		ins[r] = inputs(Float32, Sum, count, r, seed)
		outs[r] = make([]byte, len(ins[r]))
	}
	errs = onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(ins[c.rank], outs[c.rank], count, Float32, Sum)
	})
	return errs, outs, reference(Float32, Sum, ins, count)
}

func intMax(dt DataType, a, b int64) int64 {
	if dt == Uint64 {
		return int64(max(uint64(a), uint64(b)))
	}
	return max(a, b)
}

// requireClose checks an average of n ranks' float inputs against the reference:
// within (n+1) machine epsilons of dt relative to the expected value. The test
// inputs are small integers, whose sum is exact in every float type, so only the
// division rounds; the bound leaves room for a sum rounded at each of n steps.
func requireClose(t *testing.T, dt DataType, n int, want, got []byte, count int, msg string) {
	t.Helper()
	eps := map[DataType]float64{Float16: 0x1p-10, Bfloat16: 0x1p-7, Float32: 0x1p-23, Float64: 0x1p-52}[dt]
	require.NotZero(t, eps, "requireClose: no epsilon for %s", dt)
	for i := 0; i < count; i++ {
		w, g := getElem(want, dt, i), getElem(got, dt, i)
		require.InDelta(t, w, g, float64(n+1)*eps*math.Abs(w), "%s: element %d", msg, i)
	}
}

func TestAllReduce(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 11} {
		for _, algo := range []Algo{AlgoRing, AlgoRecDoubling, AlgoHalving, AlgoChain} {
			comms := memComms(t, n, func(c *config) { c.algo[KindAllReduce] = []Algo{algo}; c.llThreshold = 1 << 16 })
			for ci, count := range []int{0, 1, 7, 3*n + 1, 1000} {
				for _, dt := range allTypes {
					for _, op := range allOps {
						seed := int64(ci*100 + int(dt)*10 + int(op))
						ins := make([][]byte, n)
						outs := make([][]byte, n)
						for r := range ins { // even ranks in place, odd ranks out of place
							ins[r] = inputs(dt, op, count, r, seed)
							if r%2 == 0 {
								outs[r] = append([]byte{}, ins[r]...) // in place
							} else {
								outs[r] = make([]byte, len(ins[r]))
							}
						}
						errs := onAll(t, comms, func(c *Comm) (*Request, error) {
							send := ins[c.rank]
							if c.rank%2 == 0 {
								send = outs[c.rank]
							}
							return c.AllReduce(send, outs[c.rank], count, dt, op)
						})
						want := reference(dt, op, ins, count)
						name := fmt.Sprintf("n=%d %s count=%d %s %s", n, algo, count, dt, op)
						for r := 0; r < n; r++ {
							require.NoError(t, errs[r], name)
							if op == Avg && dt.IsFloat() {
								requireClose(t, dt, n, want, outs[r], count, name)
							} else {
								require.Equal(t, want, outs[r], "%s rank %d", name, r)
							}
							require.Equal(t, outs[0], outs[r], "%s: ranks 0 and %d differ", name, r)
						}
					}
				}
			}
		}
	}
}

// The chain over up to 16 ranks, with frames cut into many chunks.
func TestAllReduceChain(t *testing.T) {
	for n := 1; n <= 16; n++ {
		comms := memComms(t, n, func(c *config) { c.algo[KindAllReduce] = []Algo{AlgoChain}; c.chunkBytes = 1 << 10 })
		for _, count := range []int{0, 1, 7, 1000, 3001} {
			for _, op := range []RedOp{Sum, Avg, Max} {
				ins, outs := make([][]byte, n), make([][]byte, n)
				for r := range ins {
					ins[r] = inputs(Int64, op, count, r, int64(count))
					outs[r] = make([]byte, len(ins[r]))
				}
				errs := onAll(t, comms, func(c *Comm) (*Request, error) {
					return c.AllReduce(ins[c.rank], outs[c.rank], count, Int64, op)
				})
				want := reference(Int64, op, ins, count)
				for r := 0; r < n; r++ {
					require.NoError(t, errs[r])
					require.Equal(t, want, outs[r], "n=%d count=%d %s rank %d", n, count, op, r)
				}
			}
		}
	}
}

func TestAllReduceLarge(t *testing.T) {
	count := 3<<20/4 + 5 // several MiB of float32, not divisible by the rank count
	for _, n := range []int{2, 3, 4} {
		for _, algo := range []Algo{AlgoRing, AlgoHalving, AlgoChain} {
			comms := memComms(t, n, func(c *config) { c.chunkBytes = 128 << 10; c.algo[KindAllReduce] = []Algo{algo} })
			errs, outs, want := allReduceFloat32(t, comms, count, 7)
			for r := 0; r < n; r++ {
				require.NoError(t, errs[r])
				require.Equal(t, want, outs[r], "n=%d %s rank %d", n, algo, r)
			}
		}
	}
}

func TestBroadcast(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		for _, algo := range []Algo{AlgoTree, AlgoChain} {
			comms := memComms(t, n, func(c *config) { c.algo[KindBroadcast] = []Algo{algo} })
			for _, nbytes := range []int{0, 1, 1000, 1<<20 + 3} {
				for root := 0; root < n; root++ {
					src := inputs(Uint8, Sum, nbytes, root, int64(nbytes))
					outs := make([][]byte, n)
					for r := range outs {
						outs[r] = make([]byte, nbytes)
					}
					copy(outs[root], src)
					errs := onAll(t, comms, func(c *Comm) (*Request, error) {
						return c.Broadcast(outs[c.rank], outs[c.rank], nbytes, Uint8, root)
					})
					for r := 0; r < n; r++ {
						require.NoError(t, errs[r])
						require.Equal(t, src, outs[r], "n=%d %s bytes=%d root=%d rank=%d", n, algo, nbytes, root, r)
					}
				}
			}
		}
	}
}

func TestAllGather(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		comms := memComms(t, n, nil)
		for _, count := range []int{0, 1, 7, 1000, 1<<18 + 1} {
			ins := make([][]byte, n)
			outs := make([][]byte, n)
			want := []byte{}
			for r := range ins {
				ins[r] = inputs(Int32, Sum, count, r, int64(count))
				want = append(want, ins[r]...)
				outs[r] = make([]byte, n*len(ins[r]))
			}
			errs := onAll(t, comms, func(c *Comm) (*Request, error) {
				send := ins[c.rank]
				if c.rank%2 == 1 { // in place: the send buffer is this rank's block of recv
					block := len(send)
					copy(outs[c.rank][c.rank*block:], send)
					send = outs[c.rank][c.rank*block : (c.rank+1)*block]
				}
				return c.AllGather(send, outs[c.rank], count, Int32)
			})
			for r := 0; r < n; r++ {
				require.NoError(t, errs[r])
				require.Equal(t, want, outs[r], "n=%d count=%d rank=%d", n, count, r)
			}
		}
	}
}

func TestBarrierWaitsForEveryRank(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		comms := memComms(t, n, nil)
		late := n - 1
		var entered time.Time
		left := make([]time.Time, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if r == late {
					time.Sleep(50 * time.Millisecond)
					entered = time.Now()
				}
				req, err := c.Barrier()
				require.NoError(t, err)
				_, err = req.Wait(-1)
				require.NoError(t, err)
				left[r] = time.Now()
			}()
		}
		wg.Wait()
		for r := range left {
			require.False(t, left[r].Before(entered), "n=%d: rank %d left the barrier before rank %d entered", n, r, late)
		}
	}
}

func TestMismatchNamesBothSides(t *testing.T) {
	comms := memComms(t, 2, nil)
	counts := []int{1024, 2048}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 4*counts[c.rank])
		return c.AllReduce(buf, buf, counts[c.rank], Float32, Sum)
	})
	require.ErrorIs(t, errs[0], ErrMismatch)
	require.ErrorContains(t, errs[0], "rank 0 called all_reduce #1 (float32 x 1024, sum) but rank 1 called all_reduce #1 (float32 x 2048, sum)")
	require.ErrorIs(t, errs[1], ErrMismatch)
	require.ErrorContains(t, errs[1], "rank 1 called all_reduce #1 (float32 x 2048, sum) but rank 0 called all_reduce #1 (float32 x 1024, sum)")

	// The communicator is now unusable, and says why.
	errs = onAll(t, comms, func(c *Comm) (*Request, error) { return c.Barrier() })
	require.ErrorContains(t, errs[0], "failed earlier")
}

func TestTimeoutNamesMissingRank(t *testing.T) {
	// In the ring, rank 0 receives from rank 2 directly; rank 1 waits on rank 0 in turn.
	comms := memComms(t, 3, func(c *config) { c.algo[KindAllReduce] = []Algo{AlgoRing} })
	for _, c := range comms {
		c.timeout = 200 * time.Millisecond
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := 0; r < 2; r++ { // rank 2 never calls
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 4)
			req, err := comms[r].AllReduce(buf, buf, 1, Float32, Sum)
			require.NoError(t, err)
			_, errs[r] = req.Wait(-1)
		}()
	}
	wg.Wait()
	require.ErrorIs(t, errs[0], ErrTimeout)
	require.ErrorContains(t, errs[0], "waiting for rank 2")
	require.ErrorIs(t, errs[1], ErrTimeout)
}

func TestAbortFailsPendingOps(t *testing.T) {
	comms := memComms(t, 2, nil)
	buf := make([]byte, 4)
	req, err := comms[0].AllReduce(buf, buf, 1, Float32, Sum)
	require.NoError(t, err)
	req2, err := comms[0].Barrier()
	require.NoError(t, err)
	start := time.Now()
	require.NoError(t, comms[0].Abort())
	require.Less(t, time.Since(start), testtime.D(10*time.Second))
	_, err = req.Wait(-1)
	require.ErrorIs(t, err, ErrAborted)
	_, err = req2.Wait(-1)
	require.ErrorIs(t, err, ErrAborted)
	_, err = comms[0].Barrier()
	require.ErrorIs(t, err, ErrClosed)
}

func TestInvalidArguments(t *testing.T) {
	c := memComms(t, 1, nil)[0]
	buf := make([]byte, 16)
	_, err := c.AllReduce(buf, buf, 5, Float32, Sum)
	require.ErrorIs(t, err, ErrInvalidArgument)
	_, err = c.AllReduce(buf, buf, 1, DataType(42), Sum)
	require.ErrorContains(t, err, "unknown data type 42")
	_, err = c.AllReduce(buf, buf, 1, Float32, RedOp(9))
	require.ErrorContains(t, err, "unknown reduction op 9")
	_, err = c.Broadcast(buf, buf, 1, Float32, 1)
	require.ErrorContains(t, err, "root 1 is out of range")
}

// A failure after an earlier successful exchange of the same operation must still be
// reported (recursive doubling and the barrier exchange several times per operation).
func TestLateFailureIsReported(t *testing.T) {
	comms := memComms(t, 4, nil)
	for _, c := range comms {
		c.timeout = 300 * time.Millisecond
	}
	errs := onAll(t, comms[:3], func(c *Comm) (*Request, error) { return c.Barrier() }) // rank 3 never calls
	for r, err := range errs {
		require.Error(t, err, "rank %d reported success although rank 3 never entered the barrier", r)
	}
}

// linksOf returns c's links made so far, by peer (nil: none, or c's own rank).
func linksOf(c *Comm) []transport.Link {
	ls := make([]transport.Link, c.nranks)
	for p := range ls {
		ls[p] = c.peers.linkIfAny(p)
	}
	return ls
}
