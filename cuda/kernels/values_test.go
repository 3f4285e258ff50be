package kernels_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/reduce"
)

// The value tests run every kernel, through the fake driver's host build of the same
// source, on awkward counts, on buffers at every alignment case of the kernels' loops
// (both 16-byte aligned, both off by one element, off by different amounts, in place),
// with edge values, and compare the bytes with internal/reduce, the CPU path.

// kernelTypes are the data types with reduction kernels.
var kernelTypes = []reduce.DataType{
	reduce.Int8, reduce.Uint8, reduce.Int16, reduce.Uint16, reduce.Int32, reduce.Uint32,
	reduce.Int64, reduce.Uint64, reduce.Float16, reduce.Bfloat16, reduce.Float32,
	reduce.Float64, reduce.Bool, reduce.Complex64, reduce.Complex128,
}

var allOps = []reduce.RedOp{
	reduce.Sum, reduce.Prod, reduce.Max, reduce.Min, reduce.Avg, reduce.Band, reduce.Bor, reduce.Bxor,
}

// bigCount is the large awkward count: not a multiple of any pack or block.
func bigCount() int {
	if testing.Short() {
		return 65537
	}
	return 1000003
}

// layout places a run: dst and src element offsets into their allocations (sharing
// one when inPlace).
type layout struct {
	dstOff, srcOff int
	inPlace        bool
}

func (l layout) String() string {
	if l.inPlace {
		return fmt.Sprintf("in place at +%d", l.dstOff)
	}
	return fmt.Sprintf("dst+%d src+%d", l.dstOff, l.srcOff)
}

// layouts are the alignment cases for count elements; the big count gets the aligned
// case and the one where no element can go in packs.
func layouts(count int) []layout {
	if count == bigCount() {
		return []layout{{0, 0, false}, {0, 1, false}}
	}
	return []layout{{0, 0, false}, {1, 1, false}, {0, 1, false}, {3, 2, false}, {1, 1, true}}
}

// edgeValues are values of dt worth meeting in every combination: zeros of both signs,
// infinities, NaNs (quiet, signalling, negative, with payloads), the extremes, subnormals.
func edgeValues(dt reduce.DataType) [][]byte {
	var out [][]byte
	put := func(size int, bits ...uint64) {
		for _, b := range bits {
			v := make([]byte, size)
			for i := range v {
				v[i] = byte(b >> (8 * i))
			}
			out = append(out, v)
		}
	}
	ints := func(size int) {
		bits := 8 * uint(size)
		all := uint64(math.MaxUint64) >> (64 - bits)
		put(size, 0, 1, 2, 3, all, all-1, 1<<(bits-1), 1<<(bits-1)-1, 1<<(bits-1)+1, 0x55)
	}
	switch dt {
	case reduce.Int8, reduce.Uint8, reduce.Int16, reduce.Uint16, reduce.Int32, reduce.Uint32, reduce.Int64, reduce.Uint64:
		ints(dt.Size())
	case reduce.Bool:
		put(1, 0, 1, 2, 0x80, 0xff)
	case reduce.Float16:
		put(2, 0, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe01, 0x7bff, 0xfbff,
			0x0001, 0x8001, 0x03ff, 0x0400, 0x3555, 0x0200)
	case reduce.Bfloat16:
		put(2, 0, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x7f7f, 0xff7f,
			0x0001, 0x8001, 0x007f, 0x0080, 0x3eab)
	case reduce.Float32, reduce.Complex64:
		f32 := []uint64{0, 0x80000000, 0x3f800000, 0xbf800000, 0x7f800000, 0xff800000, 0x7fc00000,
			0x7f800001, 0xffc00123, 0x7f7fffff, 0xff7fffff, 0x00000001, 0x80000001, 0x00800000, 0x3eaaaaab}
		if dt == reduce.Float32 {
			put(4, f32...)
			break
		}
		for i, re := range f32 {
			put(8, re|f32[(i*7+3)%len(f32)]<<32)
		}
	case reduce.Float64, reduce.Complex128:
		f64 := []uint64{0, 1 << 63, 0x3ff0000000000000, 0xbff0000000000000, 0x7ff0000000000000,
			0xfff0000000000000, 0x7ff8000000000000, 0x7ff0000000000001, 0xfff8000000000123,
			0x7fefffffffffffff, 0xffefffffffffffff, 1, 1<<63 | 1, 0x0010000000000000, 0x3fd5555555555555}
		if dt == reduce.Float64 {
			put(8, f64...)
			break
		}
		for i, re := range f64 {
			v := make([]byte, 16)
			binary.LittleEndian.PutUint64(v, re)
			binary.LittleEndian.PutUint64(v[8:], f64[(i*7+3)%len(f64)])
			out = append(out, v)
		}
	}
	return out
}

// valuesOf returns span bytes of dt elements for dst (which 0) or src (which 1): every
// pair of edge values first (dst gets edge i/E, src edge i%E), then edge values and
// random bits mixed. One pool per (dt, which) is made, for the largest span, and reused.
func valuesOf(dt reduce.DataType, which, span int) []byte {
	key := [2]int{int(dt), which}
	if b := valuePools[key]; len(b) >= span {
		return b[:span]
	}
	rng := rand.New(rand.NewPCG(uint64(dt), uint64(which)))
	edges := edgeValues(dt)
	size, e := dt.Size(), len(edges)
	b := make([]byte, max(span, (bigCount()+8)*size))
	for i := 0; i*size < len(b); i++ {
		el := b[i*size : (i+1)*size]
		switch {
		case i < e*e && which == 0:
			copy(el, edges[i/e])
		case i < e*e:
			copy(el, edges[i%e])
		case i%2 == 0:
			copy(el, edges[rng.IntN(e)])
		default:
			var r [16]byte
			binary.LittleEndian.PutUint64(r[:], rng.Uint64())
			binary.LittleEndian.PutUint64(r[8:], rng.Uint64())
			copy(el, r[:])
		}
	}
	valuePools[key] = b
	return b[:span]
}

var valuePools = map[[2]int][]byte{}

// run is one kernel call to check: a reduction with op, or (div) a division by n.
type run struct {
	dt    reduce.DataType
	op    reduce.RedOp
	div   bool
	n     int
	count int
	l     layout
}

func (r run) String() string {
	if r.div {
		return fmt.Sprintf("divide %v by %d, %d elements, %v", r.dt, r.n, r.count, r.l)
	}
	return fmt.Sprintf("%v %v, %d elements, %v", r.dt, r.op, r.count, r.l)
}

// devMem is the memory kernels run on: the fake's device memory, or on a real GPU
// pinned host memory it maps; both are host-addressable.
type devMem interface {
	alloc(n int) uintptr
	free(p uintptr)
	drain(s driver.Stream)
}

type fakeMem struct{ fk *cudatest.Fake }

func (m fakeMem) alloc(n int) uintptr   { return m.fk.Malloc(0, n) }
func (m fakeMem) free(p uintptr)        { m.fk.Free(p) }
func (m fakeMem) drain(s driver.Stream) { m.fk.Drain(uintptr(s)) }

// bench is where check runs kernels: two device buffers and host scratch, each large
// enough for the big count of the largest type, reused by every run (the fake keeps
// freed memory, poisoned, to catch late use).
type bench struct {
	mem            devMem
	k              *kernels.Kernels
	s              driver.Stream
	dp, sp         uintptr
	dst, src, want []byte
}

func newBench(mem devMem, k *kernels.Kernels, s driver.Stream) *bench {
	n := (bigCount() + 8) * 16
	return &bench{mem: mem, k: k, s: s, dp: mem.alloc(n), sp: mem.alloc(n),
		dst: make([]byte, n), src: make([]byte, n), want: make([]byte, n)}
}

func (b *bench) free() {
	b.mem.free(b.dp)
	b.mem.free(b.sp)
}

// check runs r's kernel on fake device memory and compares every byte of both buffers
// with what internal/reduce makes of the same input (the bytes around the range must be
// untouched). It returns the first difference as an error.
func (b *bench) check(r run) error {
	size := r.dt.Size()
	span := (r.count + 4) * size
	// The pairs of edge values start at the offsets, where the kernel begins.
	dstMem, srcMem, want := b.dst[:span], b.src[:span], b.want[:span]
	clear(dstMem[:r.l.dstOff*size])
	clear(srcMem[:r.l.srcOff*size])
	copy(dstMem[r.l.dstOff*size:], valuesOf(r.dt, 0, span))
	copy(srcMem[r.l.srcOff*size:], valuesOf(r.dt, 1, span))
	sp := b.sp
	if r.l.inPlace {
		srcMem, sp = dstMem, b.dp
	}
	cudatest.Poke(b.dp, dstMem)
	if !r.l.inPlace {
		cudatest.Poke(sp, srcMem)
	}
	lo, hi := r.l.dstOff*size, (r.l.dstOff+r.count)*size
	copy(want, dstMem)
	var err error
	if r.div {
		err = reduce.DivideBy(want[lo:hi], r.dt, r.n)
		if err == nil {
			err = b.k.DivideBy(b.s, b.dp+uintptr(lo), r.count, r.dt, r.n)
		}
	} else {
		src := srcMem[r.l.srcOff*size : (r.l.srcOff+r.count)*size]
		if r.l.inPlace {
			src = want[lo:hi]
		}
		err = reduce.ReduceInto(want[lo:hi], src, r.dt, r.op)
		if err == nil {
			err = b.k.ReduceInto(b.s, b.dp+uintptr(lo), sp+uintptr(r.l.srcOff*size), r.count, r.dt, r.op)
		}
	}
	if err != nil {
		return fmt.Errorf("%v: %w", r, err)
	}
	b.mem.drain(b.s)
	if !r.l.inPlace && !bytes.Equal(cudatest.Peek(sp, span), srcMem) {
		return fmt.Errorf("%v: the kernel wrote to src", r)
	}
	got := cudatest.Peek(b.dp, span)
	if bytes.Equal(got, want) {
		return nil
	}
	i := firstDiff(got, want)
	el := i / size
	return fmt.Errorf("%v: element %d (byte %d of the buffer) is % x, want % x (dst was % x)",
		r, el-r.l.dstOff, i, got[el*size:(el+1)*size], want[el*size:(el+1)*size], dstMem[el*size:(el+1)*size])
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// sweepReduce checks every pair CheckReduction accepts at every count and layout, and
// returns how many pairs there were.
func (b *bench) sweepReduce(t *testing.T) int {
	pairs := 0
	for _, dt := range kernelTypes {
		for _, op := range allOps {
			if reduce.CheckReduction(dt, op) != nil {
				continue
			}
			pairs++
			for _, count := range []int{0, 1, 7, 100, bigCount()} {
				for _, l := range layouts(count) {
					require.NoError(t, b.check(run{dt: dt, op: op, count: count, l: l}))
				}
			}
		}
	}
	return pairs
}

// sweepDivide checks the division of every type that averages, by awkward divisors.
func (b *bench) sweepDivide(t *testing.T) {
	for _, dt := range kernelTypes {
		if reduce.CheckReduction(dt, reduce.Avg) != nil {
			continue
		}
		// 1<<24+1 is not a float32: it rounds to 1<<24 as reduce.DivideBy's does.
		for _, n := range []int{1, 2, 3, 7, 1<<24 + 1, 1<<40 + 3} {
			for _, count := range []int{0, 1, 7, 100, bigCount()} {
				for _, l := range []layout{{0, 0, false}, {1, 1, false}} {
					require.NoError(t, b.check(run{dt: dt, div: true, n: n, count: count, l: l}))
				}
			}
		}
	}
}

func TestKernelsMatchTheCPUReduction(t *testing.T) {
	_, fk := cudatest.Load(t)
	fk.SetDelay(0, 20)
	defer fk.SetDelay(0, 200)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		b := newBench(fakeMem{fk}, k, s)
		defer b.free()
		require.Equal(t, 97, b.sweepReduce(t), "every pair CheckReduction accepts")
	})
}

func TestKernelsMatchTheCPUDivision(t *testing.T) {
	_, fk := cudatest.Load(t)
	fk.SetDelay(0, 20)
	defer fk.SetDelay(0, 200)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		b := newBench(fakeMem{fk}, k, s)
		defer b.free()
		b.sweepDivide(t)
	})
}

// TestKernelsCorruptedKernelIsCaught: the comparison above must fail when one kernel is
// wrong: the fake's deliberately wrong implementation misses the last element.
func TestKernelsCorruptedKernelIsCaught(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		b := newBench(fakeMem{fk}, k, s)
		defer b.free()
		for _, c := range []struct {
			kernel string
			r      run
		}{
			// The last element of each holds a pair of edge values it changes: 0 + a
			// signalling NaN, 0xff or 0xff, -1 / 3.
			{"gonccl_reduce_sum_f32", run{dt: reduce.Float32, op: reduce.Avg, count: 7}},
			{"gonccl_reduce_bor_bool", run{dt: reduce.Bool, op: reduce.Max, count: 25, l: layout{1, 1, false}}},
			{"gonccl_divide_bf16", run{dt: reduce.Bfloat16, div: true, n: 3, count: 49}},
		} {
			require.NoError(t, b.check(c.r), "before corrupting")
			require.NoError(t, cudatest.CorruptKernel(cudatest.Path(t), c.kernel))
			err := b.check(c.r)
			require.NoError(t, cudatest.CorruptKernel(cudatest.Path(t), ""))
			require.ErrorContains(t, err, fmt.Sprintf("element %d ", c.r.count-1), "%s corrupted", c.kernel)
		}
	})
	require.Error(t, cudatest.CorruptKernel(cudatest.Path(t), "gonccl_reduce_bxor_f32"), "no such kernel")
}
