package reduce

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// The vector kernels must give the pure-Go loops' bits for every input; the
// loops in turn are checked against the exact references in
// ref_test.go. These tests run both paths on the same data.

// vectorTypes are the data types that have vector kernels.
var vectorTypes = []DataType{
	Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64, Float16, Bfloat16, Float32, Float64,
}

// vectorLengths exercises every tail of a 32-byte block for every element
// size, plus large odd lengths.
func vectorLengths() []int {
	var ns []int
	for n := range 68 {
		ns = append(ns, n)
	}
	return append(ns, 1001, 4099, 65537)
}

// setVector turns the vector kernels on or off for the rest of the test and
// lets them take buffers of any size; it skips the test when on is asked
// for on a machine or build without them.
func setVector(t *testing.T, on bool) {
	t.Helper()
	avail, minBytes := vectorReductions, vectorMinBytes
	if on && !avail {
		t.Skip("no vector reduction kernels in this build or on this CPU")
	}
	t.Cleanup(func() { vectorReductions, vectorMinBytes = avail, minBytes })
	vectorReductions, vectorMinBytes = on, 0
}

// reduceBothPaths returns ReduceInto's results for (dst, src) with and
// without the vector kernels.
func reduceBothPaths(t *testing.T, dt DataType, op RedOp, dst, src []byte) (scalar, vector []byte) {
	t.Helper()
	avail := vectorReductions
	defer func() { vectorReductions = avail }()
	scalar, vector = bytes.Clone(dst), bytes.Clone(dst)
	vectorReductions = false
	require.NoError(t, ReduceInto(scalar, src, dt, op))
	vectorReductions = true
	require.NoError(t, ReduceInto(vector, src, dt, op))
	return scalar, vector
}

// guardedPair returns dst and src sub-slices of n dt elements starting off
// elements into larger buffers, whose bytes around the sub-slices are
// random and must not change.
func guardedPair(rng *rand.Rand, dt DataType, n, off int, nanBias bool) (dbuf, sbuf []byte, dst, src []byte) {
	size := dt.Size()
	dbuf = randBuf(rng, dt, n+off+8, nanBias)
	sbuf = randBuf(rng, dt, n+off+8, nanBias)
	return dbuf, sbuf, dbuf[off*size : (off+n)*size], sbuf[off*size : (off+n)*size]
}

func TestReduceIntoVectorMatchesFallback(t *testing.T) {
	setVector(t, true)
	for _, dt := range vectorTypes {
		for _, op := range wantReductionOps[dt] {
			t.Run(fmt.Sprintf("%v/%v", dt, op), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(dt)+300, uint64(op)))
				for _, n := range vectorLengths() {
					for _, off := range []int{0, 1, 3} {
						nanBias := n%2 == 1
						dbuf, sbuf, dst, src := guardedPair(rng, dt, n, off, nanBias)
						before, srcBefore := bytes.Clone(dbuf), bytes.Clone(sbuf)
						vectorReductions = false
						require.NoError(t, ReduceInto(dst, src, dt, op))
						want := bytes.Clone(dbuf)
						copy(dbuf, before)
						vectorReductions = true
						require.NoError(t, ReduceInto(dst, src, dt, op))
						msg := fmt.Sprintf("n=%d off=%d", n, off)
						requireSameElems(t, dt, want, dbuf, msg)
						require.Equal(t, srcBefore, sbuf, "src changed: "+msg)

						// dst and src the same slice.
						copy(dbuf, before)
						scalar, vector := reduceBothPaths(t, dt, op, dst, dst)
						requireSameElems(t, dt, scalar, vector, "same buffer: "+msg)
					}
				}
			})
		}
	}
}

// TestReduceIntoVectorHalfExhaustive reduces every half and bfloat16 bit
// pattern against sixteen permutations of all of them.
func TestReduceIntoVectorHalfExhaustive(t *testing.T) {
	setVector(t, true)
	dst, src := alignedBytes(2<<16), alignedBytes(2<<16)
	for _, dt := range []DataType{Float16, Bfloat16} {
		for _, op := range wantReductionOps[dt] {
			for k := range 16 {
				mul, add := uint64(2*k+1), uint64(k*0x1357)
				for i := range 1 << 16 {
					refPutElem(dst, dt, i, uint64(i))
					refPutElem(src, dt, i, (uint64(i)*mul+add)&0xffff)
				}
				scalar, vector := reduceBothPaths(t, dt, op, dst, src)
				requireSameElems(t, dt, scalar, vector, fmt.Sprintf("%v/%v k=%d", dt, op, k))
			}
		}
	}
}

func TestDivideByVectorMatchesFallback(t *testing.T) {
	setVector(t, true)
	divisors := []int{1, 2, 3, 7, 10, 127, 128, 255, 256, 65535, 1 << 20, 1<<25 + 1, 1 << 31, 1<<32 + 3, 1 << 53, 1<<53 + 1, 1<<62 + 1}
	for _, dt := range vectorTypes {
		for _, d := range divisors {
			t.Run(fmt.Sprintf("%v/%d", dt, d), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(dt)+400, uint64(d)))
				lengths := vectorLengths()
				all := 0 // every bit pattern of a 1- or 2-byte type
				if dt.Size() <= 2 {
					all = 1 << (8 * dt.Size())
					lengths = append(lengths, all)
				}
				for _, n := range lengths {
					for _, off := range []int{0, 1} {
						buf, _, sub, _ := guardedPair(rng, dt, n, off, n%2 == 1)
						if n == all {
							for i := range n {
								refPutElem(sub, dt, i, uint64(i))
							}
						}
						before := bytes.Clone(buf)
						vectorReductions = false
						require.NoError(t, DivideBy(sub, dt, d))
						want := bytes.Clone(buf)
						copy(buf, before)
						vectorReductions = true
						require.NoError(t, DivideBy(sub, dt, d))
						requireSameElems(t, dt, want, buf, fmt.Sprintf("n=%d off=%d", n, off))
					}
				}
			})
		}
	}
}

// TestReduceIntoPathsMatchReference checks both paths, the fallback forced
// and the kernels at every size, against the exact references.
func TestReduceIntoPathsMatchReference(t *testing.T) {
	for _, vec := range []bool{false, true} {
		t.Run(fmt.Sprintf("vector=%v", vec), func(t *testing.T) {
			setVector(t, vec)
			for _, p := range supportedPairs() {
				rng := rand.New(rand.NewPCG(uint64(p.dt)+500, uint64(p.op)))
				for _, n := range []int{0, 1, 5, 8, 17, 33, 67, 1001} {
					dst := randBuf(rng, p.dt, n, n%2 == 1)
					src := randBuf(rng, p.dt, n, false)
					want := refReduce(p.dt, p.op, dst, src)
					require.NoError(t, ReduceInto(dst, src, p.dt, p.op))
					requireSameElems(t, p.dt, want, dst, fmt.Sprintf("%v n=%d", p, n))
				}
				if p.op != Avg {
					continue
				}
				for _, n := range []int{0, 3, 9, 67} {
					buf := randBuf(rng, p.dt, n, false)
					want := refDivide(p.dt, buf, 3)
					require.NoError(t, DivideBy(buf, p.dt, 3))
					requireSameElems(t, p.dt, want, buf, fmt.Sprintf("DivideBy %v n=%d", p.dt, n))
				}
			}
		})
	}
}

func TestReduceIntoVectorDoesNotAllocate(t *testing.T) {
	setVector(t, true)
	vectorMinBytes = 1024
	rng := rand.New(rand.NewPCG(5, 5))
	for _, dt := range vectorTypes {
		dst := randBuf(rng, dt, 1<<14, false)
		src := randBuf(rng, dt, 1<<14, false)
		for _, op := range wantReductionOps[dt] {
			allocs := testing.AllocsPerRun(10, func() {
				if err := ReduceInto(dst, src, dt, op); err != nil {
					panic(err)
				}
			})
			require.Zerof(t, allocs, "%v/%v allocates", dt, op)
		}
		if dt.Size() < 8 || dt.IsFloat() {
			allocs := testing.AllocsPerRun(10, func() {
				if err := DivideBy(dst, dt, 3); err != nil {
					panic(err)
				}
			})
			require.Zerof(t, allocs, "DivideBy %v allocates", dt)
		}
	}
}

// BenchmarkReduceIntoSmall finds the size below which a cgo call to the
// kernels costs more than the pure-Go loops (vectorMinBytes).
func BenchmarkReduceIntoSmall(b *testing.B) {
	for _, dt := range []DataType{Float32, Float64, Int32, Int8, Float16, Bfloat16} {
		for _, size := range []int{128, 256, 512, 1024, 2048, 4096} {
			for _, vec := range []bool{true, false} {
				b.Run(fmt.Sprintf("%v/%dB/vector=%v", dt, size, vec), func(b *testing.B) {
					if vec && !vectorReductions {
						b.Skip("no vector reduction kernels in this build or on this CPU")
					}
					avail, minBytes := vectorReductions, vectorMinBytes
					vectorReductions, vectorMinBytes = vec, 0
					defer func() { vectorReductions, vectorMinBytes = avail, minBytes }()
					dst, src := benchBuffers(dt, size)
					b.SetBytes(int64(size))
					for b.Loop() {
						if err := ReduceInto(dst, src, dt, Sum); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkDivideBy times DivideBy at 1 MiB with the vector kernels and with
// the pure-Go loops.
func BenchmarkDivideBy(b *testing.B) {
	const size = 1 << 20
	for _, dt := range []DataType{Float32, Bfloat16, Int32, Uint32, Int8} {
		for _, vec := range []bool{true, false} {
			b.Run(fmt.Sprintf("%v/vector=%v", dt, vec), func(b *testing.B) {
				if vec && !vectorReductions {
					b.Skip("no vector reduction kernels in this build or on this CPU")
				}
				avail := vectorReductions
				vectorReductions = vec
				defer func() { vectorReductions = avail }()
				buf, _ := benchBuffers(dt, size)
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					if err := DivideBy(buf, dt, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
