package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReduceScatter(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		for _, algo := range []Algo{AlgoRing, AlgoHalving} {
			comms := memComms(t, n, func(c *config) { c.algo[KindReduceScatter] = []Algo{algo} })
			for ci, count := range []int{0, 1, 7, 1000, 3001} { // 3001: several uneven chunks for 4- and 8-byte types
				for _, dt := range allTypes {
					for _, op := range allOps {
						if !reducible(dt, op) {
							continue
						}
						seed := int64(ci*1000 + int(dt)*10 + int(op))
						runReduceScatter(t, comms, count, dt, op, seed, fmt.Sprintf("n=%d %s count=%d %s %s", n, algo, count, dt, op))
					}
				}
			}
		}
	}
}

// Recursive halving up to 16 ranks (powers of two and the ranks beyond them that fold
// in), with frames cut into many chunks.
func TestReduceScatterHalving(t *testing.T) {
	for n := 1; n <= 16; n++ {
		comms := memComms(t, n, func(c *config) { c.algo[KindReduceScatter] = []Algo{AlgoHalving}; c.chunkBytes = 1 << 10 })
		for ci, count := range []int{0, 1, 7, 1000, 3001} {
			for _, dt := range []DataType{Float32, Int64, Bfloat16} {
				for _, op := range []RedOp{Sum, Avg, Max} {
					if !reducible(dt, op) {
						continue
					}
					seed := int64(ci*1000 + int(dt)*10 + int(op))
					runReduceScatter(t, comms, count, dt, op, seed, fmt.Sprintf("n=%d halving count=%d %s %s", n, count, dt, op))
				}
			}
		}
	}
}

// runReduceScatter runs one ReduceScatter, even ranks in place and odd ranks out of
// place, and checks every rank's block and that out-of-place send buffers are
// unchanged.
func runReduceScatter(t *testing.T, comms []*Comm, count int, dt DataType, op RedOp, seed int64, name string) {
	t.Helper()
	n, block := len(comms), count*dt.Size()
	ins := make([][]byte, n)
	sends := make([][]byte, n)
	outs := make([][]byte, n)
	for r := range ins {
		ins[r] = inputs(dt, op, n*count, r, seed)
		sends[r] = append([]byte{}, ins[r]...)
		if r%2 == 0 {
			outs[r] = sends[r][r*block : (r+1)*block]
		} else {
			outs[r] = filled(block)
		}
	}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.ReduceScatter(sends[c.rank], outs[c.rank], count, dt, op)
	})
	want := reference(dt, op, ins, n*count)
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r], name)
		requireReduced(t, dt, op, n, want[r*block:(r+1)*block], outs[r], count, fmt.Sprintf("%s rank %d", name, r))
		if r%2 == 1 {
			require.Equal(t, ins[r], sends[r], "%s: rank %d's send buffer changed", name, r)
		}
	}
}

func TestReduceScatterLarge(t *testing.T) {
	count := 1<<20 + 3 // 4 MiB of float32 per rank
	for _, n := range []int{2, 3, 4} {
		for _, algo := range []Algo{AlgoRing, AlgoHalving} {
			comms := memComms(t, n, func(c *config) { c.chunkBytes = 128 << 10; c.algo[KindReduceScatter] = []Algo{algo} })
			runReduceScatter(t, comms, count, Float32, Sum, 3, fmt.Sprintf("n=%d %s", n, algo))
			runReduceScatter(t, comms, count/n, Int32, Max, 4, fmt.Sprintf("n=%d %s", n, algo))
		}
	}
}

func TestReduceScatterMismatchNamesBothSides(t *testing.T) {
	// Over real sockets: the first chunk each rank sends sits in the kernel's buffer,
	// so each side reads the other's header. (Unbuffered in-memory pipes make the
	// outcome a race between one side's diagnosis and the other's blocked send.)
	comms := initAll(t, 2)
	defer func() {
		for _, c := range comms {
			_ = c.Abort()
		}
	}()
	counts := []int{1024, 1000}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 2*4*counts[c.rank])
		return c.ReduceScatter(buf, buf[:4*counts[c.rank]], counts[c.rank], Float32, Sum)
	})
	require.ErrorIs(t, errs[0], ErrMismatch)
	require.ErrorContains(t, errs[0], "rank 0 called reduce_scatter #1 (float32 x 1024 per rank, sum) but rank 1 called reduce_scatter #1 (float32 x 1000 per rank, sum)")
	require.ErrorIs(t, errs[1], ErrMismatch)
	require.ErrorContains(t, errs[1], "rank 1 called reduce_scatter #1 (float32 x 1000 per rank, sum) but rank 0 called reduce_scatter #1 (float32 x 1024 per rank, sum)")
}

// TestWorkMemoryReusedAndFreed checks that the work buffer grows only as needed and
// is gone after Destroy.
func TestWorkMemoryReusedAndFreed(t *testing.T) {
	comms := memComms(t, 3, func(c *config) { c.algo[KindReduce] = []Algo{AlgoTree} })
	for _, count := range []int{100000, 10} {
		runReduce(t, comms, count, Int64, Sum, 0, 1, false, fmt.Sprint(count))
	}
	require.GreaterOrEqual(t, len(comms[1].work), 2*8*100000)
	for _, c := range comms {
		require.NoError(t, c.Destroy())
		require.Nil(t, c.work)
	}
}
