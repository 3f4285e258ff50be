package kernels_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/reduce"
)

// The one-pass kernels (Kernels.ReduceMany, cuda/kernels/multi.cuh) against the CPU:
// every pair CheckReduction accepts, 1 to 8 inputs, 1 to 8 outputs, awkward counts,
// every alignment case of the loop (all buffers 16-byte aligned, all off by one element,
// off by different amounts, outputs that are inputs), edge values, each output compared
// byte for byte with internal/reduce's chain in[0] op in[1] op ... (then the division,
// for avg), and every byte around the ranges, and every input that is not an output,
// left as it was.

// multiLayout places the buffers of a one-pass run.
type multiLayout int

const (
	multiAligned multiLayout = iota // every buffer at a 16-byte boundary
	multiOffset                     // every buffer one element past one: packs after a head
	multiMixed                      // different offsets: no element can go in packs
	multiInPlace                    // output j is input j (one element past a boundary)
)

var multiLayoutNames = []string{"aligned", "all +1", "mixed offsets", "in place"}

// offsets returns the element offsets of the inputs and outputs in their buffers.
func (l multiLayout) offsets(nin, nout int) (in, out []int) {
	in, out = make([]int, nin), make([]int, nout)
	for p := range in {
		switch l {
		case multiOffset, multiInPlace:
			in[p] = 1
		case multiMixed:
			in[p] = p % 3
		}
	}
	for j := range out {
		switch l {
		case multiOffset, multiInPlace:
			out[j] = 1
		case multiMixed:
			out[j] = (j + 1) % 4
		}
	}
	return in, out
}

type multiRun struct {
	dt               reduce.DataType
	op               reduce.RedOp
	count, nin, nout int
	l                multiLayout
}

func (r multiRun) String() string {
	return fmt.Sprintf("%v %v, %d elements, %d inputs -> %d outputs, %s", r.dt, r.op, r.count, r.nin, r.nout, multiLayoutNames[r.l])
}

// multiBench holds 2*MaxReduceOperands device buffers of capElems 16-byte elements
// each, reused by every run.
type multiBench struct {
	mem      devMem
	k        *kernels.Kernels
	s        driver.Stream
	capElems int
	bufs     []uintptr
}

func newMultiBench(mem devMem, k *kernels.Kernels, s driver.Stream, capElems int) *multiBench {
	b := &multiBench{mem: mem, k: k, s: s, capElems: capElems}
	for range 2 * kernels.MaxReduceOperands {
		b.bufs = append(b.bufs, mem.alloc((capElems+8)*16))
	}
	return b
}

func (b *multiBench) free() {
	for _, p := range b.bufs {
		b.mem.free(p)
	}
}

// check runs r on the device and compares every buffer it names with the CPU's answer.
func (b *multiBench) check(r multiRun) error {
	if (r.count+4)*r.dt.Size() > (b.capElems+8)*16 {
		return fmt.Errorf("%v: count over the bench's %d elements", r, b.capElems)
	}
	size := r.dt.Size()
	span := (r.count + 4) * size
	inOff, outOff := r.l.offsets(r.nin, r.nout)
	// Input p lives in bufs[p]; output j in bufs[MaxReduceOperands+j], or in place in
	// input j's buffer.
	outBuf := func(j int) int {
		if r.l == multiInPlace && j < r.nin {
			return j
		}
		return kernels.MaxReduceOperands + j
	}
	before := map[int][]byte{} // every buffer's span as written
	ins := make([]uintptr, r.nin)
	for p := range r.nin {
		mem := make([]byte, span)
		copy(mem[inOff[p]*size:], multiValues(r.dt, p, span))
		before[p] = mem
		ins[p] = b.bufs[p] + uintptr(inOff[p]*size)
	}
	outs := make([]uintptr, r.nout)
	for j := range r.nout {
		bi := outBuf(j)
		if _, ok := before[bi]; !ok {
			before[bi] = bytes.Repeat([]byte{0xEE, 0x11}, span/2+1)[:span]
		}
		outs[j] = b.bufs[bi] + uintptr(outOff[j]*size)
	}
	for bi, mem := range before {
		cudatest.Poke(b.bufs[bi], mem)
	}
	// The CPU's answer: the chain of two-operand reductions, then the division.
	acc := append([]byte(nil), before[0][inOff[0]*size:(inOff[0]+r.count)*size]...)
	for p := 1; p < r.nin; p++ {
		if err := reduce.ReduceInto(acc, before[p][inOff[p]*size:(inOff[p]+r.count)*size], r.dt, r.op); err != nil {
			return fmt.Errorf("%v: %w", r, err)
		}
	}
	if r.op == reduce.Avg {
		if err := reduce.DivideBy(acc, r.dt, r.nin); err != nil {
			return fmt.Errorf("%v: %w", r, err)
		}
	}
	want := map[int][]byte{}
	for bi, mem := range before {
		want[bi] = append([]byte(nil), mem...)
	}
	for j := range r.nout {
		copy(want[outBuf(j)][outOff[j]*size:], acc)
	}
	if err := b.k.ReduceMany(b.s, outs, ins, r.count, r.dt, r.op); err != nil {
		return fmt.Errorf("%v: %w", r, err)
	}
	b.mem.drain(b.s)
	// Outputs first, in order, then the inputs.
	var order []int
	for j := range r.nout {
		order = append(order, outBuf(j))
	}
	for p := range r.nin {
		order = append(order, p)
	}
	for _, bi := range order {
		w := want[bi]
		got := cudatest.Peek(b.bufs[bi], span)
		if bytes.Equal(got, w) {
			continue
		}
		i := firstDiff(got, w)
		el := i / size
		what := fmt.Sprintf("input %d", bi)
		off := 0
		for j := range r.nout {
			if outBuf(j) == bi {
				what, off = fmt.Sprintf("output %d", j), outOff[j]
			}
		}
		if what[0] == 'i' {
			off = inOff[bi]
		}
		return fmt.Errorf("%v: %s: element %d (byte %d of the buffer) is % x, want % x",
			r, what, el-off, i, got[el*size:(el+1)*size], w[el*size:(el+1)*size])
	}
	return nil
}

// multiValues is span bytes of values for input p: valuesOf's dst values for input 0,
// its src values for input 1 (so 0 op 1 meets every pair of edge values), and the src
// values shifted by a few elements for the others.
func multiValues(dt reduce.DataType, p, span int) []byte {
	if p < 2 {
		return valuesOf(dt, p, span)
	}
	skip := (p - 1) * 7 * dt.Size()
	return valuesOf(dt, 1, span+skip)[skip:]
}

// sweepMulti checks every pair CheckReduction accepts at a few operand counts, element
// counts and layouts, and returns how many pairs there were.
func (b *multiBench) sweepMulti(t *testing.T) int {
	pairs := 0
	for _, dt := range kernelTypes {
		for _, op := range allOps {
			if reduce.CheckReduction(dt, op) != nil {
				continue
			}
			pairs++
			require.NoError(t, b.check(multiRun{dt: dt, op: op, count: 0, nin: 2, nout: 2}))
			// Two ranks' all_reduce, at counts below, around and above a pack, in every
			// layout; then other operand counts at one count that has a head, packs and
			// a tail.
			for _, count := range []int{1, 7, 100} {
				for l := multiAligned; l <= multiInPlace; l++ {
					require.NoError(t, b.check(multiRun{dt: dt, op: op, count: count, nin: 2, nout: 2, l: l}))
				}
			}
			for _, n := range [][2]int{{1, 1}, {3, 1}, {4, 4}, {8, 8}, {2, 8}} {
				for l := multiAligned; l <= multiInPlace; l++ {
					require.NoError(t, b.check(multiRun{dt: dt, op: op, count: 100, nin: n[0], nout: n[1], l: l}))
				}
			}
			// Packs, head and tail at a count no pack or block divides.
			require.NoError(t, b.check(multiRun{dt: dt, op: op, count: 4099, nin: 3, nout: 3, l: multiOffset}))
			require.NoError(t, b.check(multiRun{dt: dt, op: op, count: 4099, nin: 2, nout: 2, l: multiInPlace}))
		}
	}
	return pairs
}

func TestKernelsOnePassMatchesTheCPUReduction(t *testing.T) {
	_, fk := cudatest.Load(t)
	fk.SetDelay(0, 0) // a sweep of values, not of orderings
	defer fk.SetDelay(0, 200)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		b := newMultiBench(fakeMem{fk}, k, s, 4200)
		defer b.free()
		require.Equal(t, 97, b.sweepMulti(t), "every pair CheckReduction accepts")
	})
}

// TestKernelsOnePassGridStride: more elements than a launch has threads (2048 blocks of
// 256, one complex128 each), so threads go round the grid-stride loop more than once.
func TestKernelsOnePassGridStride(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		const count = 2048*256 + 1001
		b := newMultiBench(fakeMem{fk}, k, s, count+8)
		defer b.free()
		require.NoError(t, b.check(multiRun{dt: reduce.Complex128, op: reduce.Avg, count: count, nin: 2, nout: 2, l: multiAligned}))
		require.NoError(t, b.check(multiRun{dt: reduce.Float32, op: reduce.Sum, count: count * 4, nin: 2, nout: 1, l: multiOffset}))
	})
}

// TestKernelsOnePassRefusesBadCalls: unsupported pairs, operand counts out of range and
// null pointers are refused before anything is launched.
func TestKernelsOnePassRefusesBadCalls(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		p := fk.Malloc(0, 64)
		before := fk.Counters().Kernels
		err := k.ReduceMany(s, []uintptr{p}, []uintptr{p, p}, 4, reduce.Bool, reduce.Avg)
		require.ErrorIs(t, err, reduce.ErrInvalidArgument)
		require.ErrorContains(t, err, "no avg one-pass reduction kernel for bool")
		nine := make([]uintptr, 9)
		for i := range nine {
			nine[i] = p
		}
		require.ErrorContains(t, k.ReduceMany(s, []uintptr{p}, nine, 4, reduce.Float32, reduce.Sum), "9 inputs and 1 outputs (1 to 8 of each)")
		require.ErrorContains(t, k.ReduceMany(s, nine, []uintptr{p}, 4, reduce.Float32, reduce.Sum), "1 inputs and 9 outputs")
		require.ErrorContains(t, k.ReduceMany(s, nil, []uintptr{p}, 4, reduce.Float32, reduce.Sum), "1 inputs and 0 outputs")
		require.ErrorContains(t, k.ReduceMany(s, []uintptr{p}, []uintptr{p, 0}, 4, reduce.Float32, reduce.Sum), "null device pointer")
		require.ErrorContains(t, k.ReduceMany(s, []uintptr{0}, []uintptr{p}, 4, reduce.Float32, reduce.Sum), "null device pointer")
		require.ErrorContains(t, k.ReduceMany(s, []uintptr{p}, []uintptr{p}, -1, reduce.Float32, reduce.Sum), "negative count -1")
		require.NoError(t, k.ReduceMany(s, []uintptr{p}, []uintptr{p}, 0, reduce.Float32, reduce.Sum), "nothing to reduce")
		fk.Drain(uintptr(s))
		require.Equal(t, before, fk.Counters().Kernels, "a refused call launches nothing")
		require.NoError(t, fk.Free(p))
	})
}

// TestKernelsOnePassCorruptedKernelIsCaught: the comparison must fail when a one-pass
// kernel is wrong (the fake's deliberately wrong implementation misses the last
// element, so every output keeps its old last element).
func TestKernelsOnePassCorruptedKernelIsCaught(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		b := newMultiBench(fakeMem{fk}, k, s, 200)
		defer b.free()
		for _, c := range []struct {
			kernel string
			r      multiRun
		}{
			{"gonccl_multi_avg_f16", multiRun{dt: reduce.Float16, op: reduce.Avg, count: 37, nin: 3, nout: 3, l: multiOffset}},
			{"gonccl_multi_bor_bool", multiRun{dt: reduce.Bool, op: reduce.Max, count: 100, nin: 2, nout: 2, l: multiInPlace}},
			{"gonccl_multi_prod_c128", multiRun{dt: reduce.Complex128, op: reduce.Prod, count: 9, nin: 4, nout: 1, l: multiAligned}},
		} {
			require.NoError(t, b.check(c.r), "before corrupting")
			require.NoError(t, cudatest.CorruptKernel(cudatest.Path(t), c.kernel))
			err := b.check(c.r)
			require.NoError(t, cudatest.CorruptKernel(cudatest.Path(t), ""))
			require.ErrorContains(t, err, fmt.Sprintf("output 0: element %d ", c.r.count-1), "%s corrupted", c.kernel)
		}
	})
}
