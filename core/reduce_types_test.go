package core

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// extendedCases lists the (type, op) pairs core reduces beyond allTypes x allOps
// (int16, bool, complex, bitwise ops, ...), found by asking core, so the list grows
// with it.
func extendedCases() (cases [][2]int) {
	covered := map[[2]int]bool{}
	for _, dt := range allTypes {
		for _, op := range allOps {
			covered[[2]int{int(dt), int(op)}] = true
		}
	}
	for dt := 0; dt < 256; dt++ {
		for op := 0; op < 256; op++ {
			k := [2]int{dt, op}
			if DataType(dt).Valid() && RedOp(op).Valid() && !covered[k] && reducible(DataType(dt), RedOp(op)) {
				cases = append(cases, k)
			}
		}
	}
	return cases
}

// exactInputs makes rank r's input for any reducible type: values whose reduction
// is exact in any order (integers wrap, bools are 0 or 1, complex parts are small
// integers: products stay below 2^24).
func exactInputs(dt DataType, op RedOp, count, rank int, seed int64) []byte {
	switch {
	case dt.IsComplex():
		part := Float32
		if dt == Complex128 {
			part = Float64
		}
		return inputs(part, op, 2*count, rank, seed)
	case dt == Bool:
		rng := rand.New(rand.NewSource(seed*1000 + int64(rank)))
		b := make([]byte, count)
		for i := range b {
			b[i] = byte(rng.Intn(2))
		}
		return b
	case dt.IsFloat():
		return inputs(dt, op, count, rank, seed)
	}
	rng := rand.New(rand.NewSource(seed*1000 + int64(rank)))
	b := make([]byte, count*dt.Size())
	rng.Read(b)
	return b
}

// foldReference reduces ins in rank order with ReduceInto (checked against its own
// reference in reduce_test.go), dividing once for Avg.
func foldReference(t *testing.T, dt DataType, op RedOp, ins [][]byte) []byte {
	out := append([]byte{}, ins[0]...)
	for _, in := range ins[1:] {
		require.NoError(t, ReduceInto(out, in, dt, op))
	}
	if op == Avg {
		require.NoError(t, DivideBy(out, dt, len(ins)))
	}
	return out
}

// requireSame compares exactly, except that complex parts compare as numbers: the
// sign of a zero part of a product depends on the order of the factors.
func requireSame(t *testing.T, dt DataType, want, got []byte, msg string, args ...any) {
	t.Helper()
	if !dt.IsComplex() {
		require.Equal(t, want, got, append([]any{msg}, args...)...)
		return
	}
	part := Float32
	if dt == Complex128 {
		part = Float64
	}
	require.Equal(t, len(want), len(got))
	for i := 0; i < len(want)/part.Size(); i++ {
		require.Equal(t, getElem(want, part, i), getElem(got, part, i), append([]any{msg + " part %d"}, append(args, i)...)...)
	}
}

func TestReduceAndReduceScatterExtendedTypes(t *testing.T) {
	cases := extendedCases()
	for _, n := range []int{1, 2, 3, 5, 8} {
		for _, algo := range []Algo{AlgoTree, AlgoChain} {
			comms := memComms(t, n, func(c *config) { c.algo[KindReduce] = []Algo{algo} })
			for ci, count := range []int{0, 1, 7, 1000, 5000} {
				for _, k := range cases {
					dt, op := DataType(k[0]), RedOp(k[1])
					seed := int64(ci*100000 + k[0]*256 + k[1])
					name := fmt.Sprintf("n=%d %s count=%d %s %s", n, algo, count, dt, op)
					root := (ci + k[0] + k[1]) % n

					ins := make([][]byte, n)
					outs := make([][]byte, n)
					for r := range ins {
						ins[r] = exactInputs(dt, op, count, r, seed)
						outs[r] = filled(len(ins[r]))
					}
					errs := onAll(t, comms, func(c *Comm) (*Request, error) {
						return c.Reduce(ins[c.rank], outs[c.rank], count, dt, op, root)
					})
					want := foldReference(t, dt, op, ins)
					for r := 0; r < n; r++ {
						require.NoError(t, errs[r], name)
					}
					requireSame(t, dt, want, outs[root], "reduce %s root %d", name, root)

					if algo == AlgoChain {
						continue // reduce_scatter has one algorithm
					}
					block := count * dt.Size()
					for r := range ins {
						ins[r] = exactInputs(dt, op, n*count, r, seed+1)
						outs[r] = filled(block)
					}
					errs = onAll(t, comms, func(c *Comm) (*Request, error) {
						return c.ReduceScatter(ins[c.rank], outs[c.rank], count, dt, op)
					})
					want = foldReference(t, dt, op, ins)
					for r := 0; r < n; r++ {
						require.NoError(t, errs[r], name)
						requireSame(t, dt, want[r*block:(r+1)*block], outs[r], "reduce_scatter %s rank %d", name, r)
					}
				}
			}
		}
	}
}
