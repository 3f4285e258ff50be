package core

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/gonccl/gonccl/internal/reduce"

	"github.com/stretchr/testify/require"
)

// reducible reports whether dt reduces with op, from internal/reduce's hand-written
// table, not by asking core: support core lost would otherwise shrink the sweeps
// instead of failing them.
func reducible(dt DataType, op RedOp) bool { return slices.Contains(reduce.WantReductionOps[dt], op) }

// requireReduced checks got against the reference reduction want of n ranks' inputs.
func requireReduced(t *testing.T, dt DataType, op RedOp, n int, want, got []byte, count int, msg string) {
	t.Helper()
	if op == Avg && dt.IsFloat() {
		requireClose(t, dt, n, want, got, count, msg)
		return
	}
	require.Equal(t, want, got, msg)
}

// filled returns n bytes of 0xAB: memory a collective must not write.
func filled(n int) []byte { return bytes.Repeat([]byte{0xAB}, n) }

func TestReduce(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		for _, algo := range []Algo{AlgoTree, AlgoChain} {
			comms := memComms(t, n, func(c *config) { c.algo[KindReduce] = []Algo{algo} })
			for ci, count := range []int{0, 1, 7, 3*n + 1, 1000, 5000} {
				for _, dt := range allTypes {
					for _, op := range allOps {
						if !reducible(dt, op) {
							continue
						}
						// Every root for one type and op; a rotating root for the rest.
						roots := []int{(ci + int(dt) + int(op)) % n}
						if dt == Float32 && op == Sum {
							roots = roots[:0]
							for r := 0; r < n; r++ {
								roots = append(roots, r)
							}
						}
						for _, root := range roots {
							seed := int64(ci*1000 + int(dt)*10 + int(op))
							name := fmt.Sprintf("n=%d %s count=%d %s %s root=%d", n, algo, count, dt, op, root)
							runReduce(t, comms, count, dt, op, root, seed, root%2 == 0, name)
						}
					}
				}
			}
		}
	}
}

// runReduce runs one Reduce (root in place if inPlace) and checks root's result,
// that non-roots' recv buffers are untouched and that no send buffer changed.
func runReduce(t *testing.T, comms []*Comm, count int, dt DataType, op RedOp, root int, seed int64, inPlace bool, name string) {
	t.Helper()
	n := len(comms)
	ins := make([][]byte, n)
	sends := make([][]byte, n)
	outs := make([][]byte, n)
	for r := range ins {
		ins[r] = inputs(dt, op, count, r, seed)
		sends[r] = append([]byte{}, ins[r]...)
		outs[r] = filled(len(ins[r]))
	}
	if inPlace {
		sends[root] = outs[root]
		copy(outs[root], ins[root])
	}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.Reduce(sends[c.rank], outs[c.rank], count, dt, op, root)
	})
	want := reference(dt, op, ins, count)
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r], name)
		if r == root {
			requireReduced(t, dt, op, n, want, outs[r], count, name)
			continue
		}
		require.Equal(t, filled(len(ins[r])), outs[r], "%s: rank %d's recv buffer was written", name, r)
		require.Equal(t, ins[r], sends[r], "%s: rank %d's send buffer changed", name, r)
	}
}

func TestReduceLarge(t *testing.T) {
	count := 3<<20/4 + 5 // several MiB of float32, not divisible into chunks evenly
	for _, n := range []int{2, 3, 5} {
		comms := memComms(t, n, func(c *config) { c.chunkBytes = 128 << 10 })
		for _, root := range []int{0, n - 1} {
			runReduce(t, comms, count, Float32, Sum, root, 11, root == 0, fmt.Sprintf("n=%d root=%d", n, root))
		}
	}
}

// TestReduceTreeBeyondScratch forces the tree on a message larger than the scratch
// memory: partials go to the work buffer, which grows.
func TestReduceTreeBeyondScratch(t *testing.T) {
	comms := memComms(t, 7, func(c *config) { c.algo[KindReduce] = []Algo{AlgoTree} })
	runReduce(t, comms, 100000, Int64, Sum, 3, 5, false, "tree, 800 KB")
}

func TestGather(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		comms := memComms(t, n, nil)
		for _, count := range []int{0, 1, 7, 1000, 1<<18 + 3} {
			for root := 0; root < n; root++ {
				ins := make([][]byte, n)
				want := []byte{}
				for r := range ins {
					ins[r] = inputs(Int32, Sum, count, r, int64(count+root))
					want = append(want, ins[r]...)
				}
				block := len(ins[0])
				outs := make([][]byte, n)
				for r := range outs {
					outs[r] = filled(n * block)
				}
				inPlace := (root+count)%2 == 0
				errs := onAll(t, comms, func(c *Comm) (*Request, error) {
					send := append([]byte{}, ins[c.rank]...)
					if c.rank == root && inPlace {
						send = outs[root][root*block : (root+1)*block]
						copy(send, ins[root])
					}
					return c.Gather(send, outs[c.rank], count, Int32, root)
				})
				name := fmt.Sprintf("n=%d count=%d root=%d in-place=%v", n, count, root, inPlace)
				for r := 0; r < n; r++ {
					require.NoError(t, errs[r], name)
					if r == root {
						require.Equal(t, want, outs[r], name)
					} else {
						require.Equal(t, filled(n*block), outs[r], "%s: rank %d's recv buffer was written", name, r)
					}
				}
			}
		}
	}
}

func TestScatter(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		comms := memComms(t, n, nil)
		for _, count := range []int{0, 1, 7, 1000, 1<<18 + 3} {
			for root := 0; root < n; root++ {
				src := inputs(Int64, Sum, n*count, root, int64(count+root))
				block := count * 8
				sends := make([][]byte, n)
				outs := make([][]byte, n)
				for r := range outs {
					outs[r] = make([]byte, block)
					sends[r] = filled(n * block) // never read off the root
				}
				sends[root] = append([]byte{}, src...)
				inPlace := (root+count)%2 == 0
				if inPlace {
					outs[root] = sends[root][root*block : (root+1)*block]
				}
				errs := onAll(t, comms, func(c *Comm) (*Request, error) {
					return c.Scatter(sends[c.rank], outs[c.rank], count, Int64, root)
				})
				name := fmt.Sprintf("n=%d count=%d root=%d in-place=%v", n, count, root, inPlace)
				for r := 0; r < n; r++ {
					require.NoError(t, errs[r], name)
					require.Equal(t, src[r*block:(r+1)*block], outs[r], "%s rank %d", name, r)
				}
				require.Equal(t, src, sends[root], "%s: root's send buffer changed", name)
			}
		}
	}
}

func TestRootedMismatchNamesBothSides(t *testing.T) {
	comms := memComms(t, 2, nil)
	counts := []int{8, 9}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 2*4*counts[c.rank])
		return c.Gather(buf[:4*counts[c.rank]], buf, counts[c.rank], Float32, 1)
	})
	require.ErrorIs(t, errs[1], ErrMismatch)
	require.ErrorContains(t, errs[1], "rank 1 called gather #1 (float32 x 9, root 1) but rank 0 called gather #1 (float32 x 8, root 1)")
	require.Error(t, errs[0])

	// Reduce along the chain: rank 1 sends to root 0 only, so only root sees the
	// mismatch; rank 1 learns that root failed.
	comms = memComms(t, 2, func(c *config) { c.algo[KindReduce] = []Algo{AlgoChain} })
	errs = onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 64)
		return c.Reduce(buf, buf, 16+c.rank, Uint8, Max, 0)
	})
	require.ErrorIs(t, errs[0], ErrMismatch)
	require.ErrorContains(t, errs[0], "rank 0 called reduce #1 (uint8 x 16, max, root 0) but rank 1 called reduce #1 (uint8 x 17, max, root 0)")
	require.Error(t, errs[1])
}

func TestRootedInvalidArguments(t *testing.T) {
	comms := memComms(t, 2, nil)
	c := comms[1]
	buf := make([]byte, 16)
	_, err := c.Reduce(buf, nil, 4, Float32, Sum, 0) // recv is not needed off the root
	require.NoError(t, err)
	_, err = c.Reduce(buf, nil, 4, Float32, Sum, 1)
	require.ErrorContains(t, err, "reduce: receive buffer holds 0 bytes")
	_, err = c.Reduce(buf, buf, 4, Float32, Sum, 2)
	require.ErrorContains(t, err, "root 2 is out of range")
	_, err = c.Gather(buf, buf, 3, Float32, 1)
	require.ErrorContains(t, err, "gather: receive buffer holds 16 bytes, need 24")
	_, err = c.Scatter(buf, buf, 3, Float32, 1)
	require.ErrorContains(t, err, "scatter: send buffer holds 16 bytes, need 24")
	_, err = c.Scatter(nil, buf, 3, Float32, 0)
	require.NoError(t, err) // send is not needed off the root
	_, err = c.ReduceScatter(buf, buf, 3, Float32, Sum)
	require.ErrorContains(t, err, "reduce_scatter: send buffer holds 16 bytes, need 24")
	_, err = c.ReduceScatter(buf, buf, -1, Float32, Sum)
	require.ErrorIs(t, err, ErrInvalidArgument)
}
