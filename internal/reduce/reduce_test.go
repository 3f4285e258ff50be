package reduce

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	allDataTypes = []DataType{
		Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16,
		Float8e4m3, Float8e5m2, Int16, Uint16, Bool, Complex64, Complex128,
	}
	allRedOps   = []RedOp{Sum, Prod, Max, Min, Avg, Band, Bor, Bxor}
	floatTypes  = []DataType{Float16, Float32, Float64, Bfloat16}
	reduceSizes = []int{0, 1, 7, 1000, 4099}
)

// reducePair is a (data type, op) pair that CheckReduction accepts.
type reducePair struct {
	dt DataType
	op RedOp
}

func (p reducePair) String() string { return p.dt.String() + "/" + p.op.String() }

// supportedPairs lists every pair that wantReductionOps says works.
func supportedPairs() []reducePair {
	var pairs []reducePair
	for _, dt := range allDataTypes {
		for _, op := range wantReductionOps[dt] {
			pairs = append(pairs, reducePair{dt, op})
		}
	}
	return pairs
}

// randBuf returns an aligned buffer of n random dt elements.
func randBuf(rng *rand.Rand, dt DataType, n int, nanBias bool) []byte {
	buf := alignedBytes(n * dt.Size())
	lane, k := refLanes(dt)
	for i := range n * k {
		refPutElem(buf, lane, i, randElem(rng, lane, nanBias))
	}
	return buf
}

// requireSameElems fails with the first differing element (or complex part)
// of dt.
func requireSameElems(t *testing.T, dt DataType, want, got []byte, msg string) {
	t.Helper()
	require.Equal(t, len(want), len(got), msg)
	lane, _ := refLanes(dt)
	for i := 0; i < len(want)/lane.Size(); i++ {
		w, g := refGetElem(want, lane, i), refGetElem(got, lane, i)
		if w != g {
			require.Failf(t, "element mismatch", "%s: %v %d: got %#x, want %#x", msg, lane, i, g, w)
		}
	}
}

func TestReduceIntoMatchesReference(t *testing.T) {
	for _, p := range supportedPairs() {
		dt, op := p.dt, p.op
		for _, n := range reduceSizes {
			t.Run(fmt.Sprintf("%v/%d", p, n), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(dt), uint64(op)<<32|uint64(n)))
				dst := randBuf(rng, dt, n, false)
				src := randBuf(rng, dt, n, false)
				want := refReduce(dt, op, dst, src)
				srcCopy := bytes.Clone(src)
				require.NoError(t, ReduceInto(dst, src, dt, op))
				requireSameElems(t, dt, want, dst, "dst")
				require.Equal(t, srcCopy, src, "src must not change")
			})
		}
	}
}

func TestReduceIntoSpecialFloats(t *testing.T) {
	inf, nan, negZero := math.Inf(1), math.NaN(), math.Copysign(0, -1)
	tests := []struct {
		name string
		op   RedOp
		a, b float64
		want float64 // NaN means the canonical NaN
	}{
		{"-0 + -0", Sum, negZero, negZero, negZero},
		{"-0 + +0", Sum, negZero, 0, 0},
		{"+0 + -0", Sum, 0, negZero, 0},
		{"x + -x", Sum, 1.5, -1.5, 0},
		{"inf + 1", Sum, inf, 1, inf},
		{"-inf + -inf", Sum, -inf, -inf, -inf},
		{"inf + -inf", Sum, inf, -inf, nan},
		{"NaN + 1", Sum, nan, 1, nan},
		{"1 + NaN", Avg, 1, nan, nan},
		{"-0 * 5", Prod, negZero, 5, negZero},
		{"-0 * -5", Prod, negZero, -5, 0},
		{"inf * 0", Prod, inf, 0, nan},
		{"inf * -2", Prod, inf, -2, -inf},
		{"max(-0, +0)", Max, negZero, 0, 0},
		{"max(+0, -0)", Max, 0, negZero, 0},
		{"min(-0, +0)", Min, negZero, 0, negZero},
		{"min(+0, -0)", Min, 0, negZero, negZero},
		{"max(NaN, 1)", Max, nan, 1, nan},
		{"max(1, NaN)", Max, 1, nan, nan},
		{"max(NaN, inf)", Max, nan, inf, nan},
		{"min(NaN, -inf)", Min, nan, -inf, nan},
		{"min(-inf, NaN)", Min, -inf, nan, nan},
		{"max(-inf, 3)", Max, -inf, 3, 3},
		{"min(inf, 3)", Min, inf, 3, 3},
		{"max(2, 3)", Max, 2, 3, 3},
		{"min(-2, 3)", Min, -2, 3, -2},
	}
	for _, dt := range floatTypes {
		for _, tt := range tests {
			t.Run(dt.String()+"/"+tt.name, func(t *testing.T) {
				dst, src := alignedBytes(dt.Size()), alignedBytes(dt.Size())
				refPutElem(dst, dt, 0, refEncodeSpecial(dt, tt.a))
				refPutElem(src, dt, 0, refEncodeSpecial(dt, tt.b))
				require.NoError(t, ReduceInto(dst, src, dt, tt.op))
				require.Equalf(t, refEncodeSpecial(dt, tt.want), refGetElem(dst, dt, 0), "got %#x", refGetElem(dst, dt, 0))
			})
		}
	}
}

func TestReduceIntoNaNPayloadsCanonical(t *testing.T) {
	tests := []struct {
		dt   DataType
		a, b uint64
	}{
		{Float32, 0x7fc00001, 0xffc00002},
		{Float32, 0x7f800001, 0xff812345},
		{Float64, 0x7ff8000000000001, 0xfff8000000000002},
		{Float64, 0x7ff0000000000001, 0x7ff4000000000000},
		{Float16, 0x7e01, 0xfe02},
		{Float16, 0x7c01, 0xfd00},
		{Bfloat16, 0x7fc1, 0xffc2},
		{Bfloat16, 0x7f81, 0xff90},
	}
	for _, tt := range tests {
		for _, op := range wantReductionOps[tt.dt] {
			t.Run(fmt.Sprintf("%v/%v/%#x/%#x", tt.dt, op, tt.a, tt.b), func(t *testing.T) {
				for _, pair := range [][2]uint64{{tt.a, tt.b}, {tt.b, tt.a}, {tt.a, 0}, {0, tt.b}} {
					dst, src := alignedBytes(tt.dt.Size()), alignedBytes(tt.dt.Size())
					refPutElem(dst, tt.dt, 0, pair[0])
					refPutElem(src, tt.dt, 0, pair[1])
					require.NoError(t, ReduceInto(dst, src, tt.dt, op))
					require.Equal(t, refCanonicalNaN[tt.dt], refGetElem(dst, tt.dt, 0))
				}
			})
		}
	}
}

func TestReduceIntoIntegerWrap(t *testing.T) {
	tests := []struct {
		dt   DataType
		op   RedOp
		a, b uint64 // two's complement bits
		want uint64
	}{
		{Int8, Sum, 127, 1, 0x80},
		{Uint8, Sum, 255, 2, 1},
		{Int8, Prod, 0x80, 0xff, 0x80}, // -128 * -1 wraps to -128
		{Int32, Sum, math.MaxInt32, 1, 0x80000000},
		{Uint32, Prod, 0x10000, 0x10000, 0},
		{Int64, Sum, math.MaxInt64, 1, 1 << 63},
		{Uint64, Sum, math.MaxUint64, 1, 0},
		{Int8, Max, 0xff, 1, 1},     // max(-1, 1)
		{Uint8, Max, 0xff, 1, 0xff}, // max(255, 1)
		{Int64, Min, 1 << 63, 0, 1 << 63},
		{Uint64, Min, 1 << 63, 0, 0},
		{Int32, Avg, 0x7fffffff, 0x7fffffff, 0xfffffffe},
		{Int16, Sum, 0x7fff, 1, 0x8000},
		{Int16, Prod, 0x8000, 0xffff, 0x8000}, // -32768 * -1 wraps to -32768
		{Int16, Max, 0xffff, 1, 1},            // max(-1, 1)
		{Int16, Min, 0x8000, 0x7fff, 0x8000},
		{Uint16, Sum, 0xffff, 2, 1},
		{Uint16, Prod, 0x100, 0x100, 0},
		{Uint16, Max, 0xffff, 1, 0xffff},
		{Uint16, Min, 0x8000, 0x7fff, 0x7fff},
		{Int8, Band, 0xf0, 0x3c, 0x30},
		{Uint8, Bor, 0xf0, 0x0f, 0xff},
		{Int16, Bxor, 0xffff, 0x00ff, 0xff00},
		{Uint16, Band, 0x8001, 0x8003, 0x8001},
		{Int32, Bor, 0x80000000, 1, 0x80000001},
		{Uint32, Bxor, 0xdeadbeef, 0xdeadbeef, 0},
		{Int64, Band, 1 << 63, math.MaxUint64, 1 << 63},
		{Uint64, Bxor, math.MaxUint64, 1, math.MaxUint64 - 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v/%#x/%#x", tt.dt, tt.op, tt.a, tt.b), func(t *testing.T) {
			dst, src := alignedBytes(tt.dt.Size()), alignedBytes(tt.dt.Size())
			refPutElem(dst, tt.dt, 0, tt.a)
			refPutElem(src, tt.dt, 0, tt.b)
			require.NoError(t, ReduceInto(dst, src, tt.dt, tt.op))
			require.Equal(t, tt.want, refGetElem(dst, tt.dt, 0))
		})
	}
}

func TestReduceIntoCommutative(t *testing.T) {
	const n = 4099
	for _, p := range supportedPairs() {
		dt, op := p.dt, p.op
		t.Run(p.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(dt)+100, uint64(op)))
			for _, nanBias := range []bool{false, true, false, true} {
				a := randBuf(rng, dt, n, nanBias)
				b := randBuf(rng, dt, n, nanBias)
				ab := append(alignedBytes(len(a))[:0], a...)
				ba := append(alignedBytes(len(b))[:0], b...)
				require.NoError(t, ReduceInto(ab, b, dt, op))
				require.NoError(t, ReduceInto(ba, a, dt, op))
				requireSameElems(t, dt, ab, ba, "op(a,b) vs op(b,a)")
			}
		})
	}
}

func TestReduceIntoSameBuffer(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, p := range supportedPairs() {
		buf := randBuf(rng, p.dt, 33, false)
		want := refReduce(p.dt, p.op, buf, buf)
		require.NoError(t, ReduceInto(buf, buf, p.dt, p.op))
		requireSameElems(t, p.dt, want, buf, p.String())
	}
}

func TestReduceIntoErrors(t *testing.T) {
	tests := []struct {
		name     string
		dst, src []byte
		dt       DataType
		op       RedOp
	}{
		{"invalid datatype", make([]byte, 4), make([]byte, 4), DataType(12), Sum},
		{"invalid datatype between ranges", make([]byte, 4), make([]byte, 4), DataType(63), Sum},
		{"invalid datatype 255", make([]byte, 4), make([]byte, 4), DataType(255), Sum},
		{"invalid op", make([]byte, 4), make([]byte, 4), Float32, RedOp(5)},
		{"invalid op after bitwise", make([]byte, 4), make([]byte, 4), Int32, RedOp(67)},
		{"undefined pair", make([]byte, 4), make([]byte, 4), Float32, Bxor},
		{"length mismatch", make([]byte, 8), make([]byte, 4), Float32, Sum},
		{"partial element", make([]byte, 6), make([]byte, 6), Float32, Sum},
		{"partial half element", make([]byte, 3), make([]byte, 3), Bfloat16, Max},
		{"partial float64 element", make([]byte, 12), make([]byte, 12), Float64, Prod},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := append([]byte(nil), tt.dst...)
			for i := range dst {
				dst[i] = byte(i + 1)
			}
			before := append([]byte(nil), dst...)
			require.ErrorIs(t, ReduceInto(dst, tt.src, tt.dt, tt.op), ErrInvalidArgument)
			require.Equal(t, before, dst, "dst must be unchanged on error")
		})
	}
	require.NoError(t, ReduceInto(nil, nil, Float32, Sum))
	require.NoError(t, ReduceInto([]byte{}, nil, Int8, Avg))
}

func TestReduceIntoDoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, p := range supportedPairs() {
		dst := randBuf(rng, p.dt, 1000, false)
		src := randBuf(rng, p.dt, 1000, false)
		allocs := testing.AllocsPerRun(10, func() {
			if err := ReduceInto(dst, src, p.dt, p.op); err != nil {
				panic(err)
			}
		})
		require.Zerof(t, allocs, "%v allocates", p)
	}
	for _, dt := range avgTypes() {
		buf := randBuf(rng, dt, 1000, false)
		allocs := testing.AllocsPerRun(10, func() {
			if err := DivideBy(buf, dt, 3); err != nil {
				panic(err)
			}
		})
		require.Zerof(t, allocs, "DivideBy %v allocates", dt)
	}
}

// avgTypes lists the data types that support Avg, and so DivideBy.
func avgTypes() []DataType {
	var dts []DataType
	for _, p := range supportedPairs() {
		if p.op == Avg {
			dts = append(dts, p.dt)
		}
	}
	return dts
}

func TestReduceDivideByMatchesReference(t *testing.T) {
	for _, dt := range avgTypes() {
		for _, n := range []int{1, 2, 3, 7, 8, 100, 1000, 1 << 20} {
			for _, size := range reduceSizes {
				t.Run(fmt.Sprintf("%v/%d/%d", dt, n, size), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(dt)+200, uint64(n)<<16|uint64(size)))
					buf := randBuf(rng, dt, size, false)
					want := refDivide(dt, buf, n)
					require.NoError(t, DivideBy(buf, dt, n))
					requireSameElems(t, dt, want, buf, "DivideBy")
				})
			}
		}
	}
}

func TestReduceDivideByKnown(t *testing.T) {
	tests := []struct {
		dt   DataType
		in   uint64
		n    int
		want uint64
	}{
		{Int8, 0xf9, 2, 0xfd},   // -7/2 = -3
		{Int8, 0x80, 128, 0xff}, // -128/128 = -1
		{Int8, 0x80, 129, 0},    // -128/129 = 0
		{Uint8, 0xff, 256, 0},   // divisor wider than the type
		{Uint8, 0xff, 255, 1},   // 255/255
		{Int32, 0xfffffff9, 2, 0xfffffffd},
		{Uint32, 0xffffffff, 1 << 32, 0},
		{Int64, 1 << 63, 3, 0xd555555555555556}, // MinInt64/3 truncates
		{Uint64, math.MaxUint64, 2, math.MaxUint64 >> 1},
		{Float32, uint64(math.Float32bits(1)), 3, uint64(math.Float32bits(float32(1) / 3))},
		{Float32, 0x7f800001, 4, 0x7fc00000},
		{Float64, math.Float64bits(-1), 4, math.Float64bits(-0.25)},
		{Float16, 0x3c00, 3, 0x3555}, // 1/3 in half
		{Float16, 0x0001, 2, 0x0000}, // 2^-25 ties to even zero
		{Float16, 0x0003, 2, 0x0002}, // 1.5*2^-24 ties to even 2
		{Float16, 0x8001, 4, 0x8000},
		{Float16, 0xfc00, 5, 0xfc00},
		{Float16, 0xfd00, 5, 0x7e00},
		{Bfloat16, 0x3f80, 3, 0x3eab}, // 1/3 in bfloat16
		{Bfloat16, 0xff81, 3, 0x7fc0},
		{Int16, 0xfff9, 2, 0xfffd},  // -7/2 = -3
		{Int16, 0x8000, 3, 0xd556},  // -32768/3 = -10922
		{Int16, 0x8000, 1 << 20, 0}, // divisor wider than the type
		{Uint16, 0xffff, 2, 0x7fff}, // 65535/2
		{Uint16, 0xffff, 65536, 0},  // divisor wider than the type
		{Uint16, 0xffff, 65535, 1},  // 65535/65535
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%#x/%d", tt.dt, tt.in, tt.n), func(t *testing.T) {
			buf := alignedBytes(tt.dt.Size())
			refPutElem(buf, tt.dt, 0, tt.in)
			require.NoError(t, DivideBy(buf, tt.dt, tt.n))
			require.Equalf(t, tt.want, refGetElem(buf, tt.dt, 0), "got %#x", refGetElem(buf, tt.dt, 0))
		})
	}
}

func TestReduceDivideByErrors(t *testing.T) {
	tests := []struct {
		name string
		buf  []byte
		dt   DataType
		n    int
	}{
		{"invalid datatype", make([]byte, 4), DataType(12), 2},
		{"bool has no avg", make([]byte, 4), Bool, 2},
		{"zero divisor", make([]byte, 4), Float32, 0},
		{"negative divisor", make([]byte, 4), Int32, -2},
		{"partial element", make([]byte, 5), Int32, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, DivideBy(tt.buf, tt.dt, tt.n), ErrInvalidArgument)
		})
	}
	require.NoError(t, DivideBy(nil, Float64, 3))
}

// BenchmarkReduceInto times ReduceInto with the vector kernels (path=vector)
// and with the pure-Go loops (path=go), next to a plain copy of the same
// size (memmove), the physical reference. Bytes are those of dst: a
// reduction reads two buffers and writes one, a copy reads one and writes one.
func BenchmarkReduceInto(b *testing.B) {
	sizes := []int{64 << 10, 1 << 20, 16 << 20}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("memmove/%s", benchSize(size)), func(b *testing.B) {
			dst, src := alignedBytes(size), alignedBytes(size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
	type benchCase struct {
		dt   DataType
		op   RedOp
		size int
	}
	var cases []benchCase
	for _, dt := range []DataType{Float32, Float16, Bfloat16, Float64, Int32} {
		for _, size := range sizes {
			cases = append(cases, benchCase{dt, Sum, size})
		}
	}
	for _, dt := range []DataType{Float32, Float16, Bfloat16} {
		cases = append(cases, benchCase{dt, Max, 1 << 20})
	}
	for _, c := range cases {
		for _, vec := range []bool{true, false} {
			path := "go"
			if vec {
				path = "vector"
			}
			b.Run(fmt.Sprintf("%v/%v/%s/path=%s", c.dt, c.op, benchSize(c.size), path), func(b *testing.B) {
				if vec && !vectorReductions {
					b.Skip("no vector reduction kernels in this build or on this CPU")
				}
				avail := vectorReductions
				vectorReductions = vec
				defer func() { vectorReductions = avail }()
				dst, src := benchBuffers(c.dt, c.size)
				b.SetBytes(int64(c.size))
				b.ReportAllocs()
				for b.Loop() {
					if err := ReduceInto(dst, src, c.dt, c.op); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchBuffers returns dst and src of size bytes of moderate finite dt
// values: the common case.
func benchBuffers(dt DataType, size int) (dst, src []byte) {
	rng := rand.New(rand.NewPCG(1, 2))
	dst, src = alignedBytes(size), alignedBytes(size)
	for i := range size / dt.Size() {
		refPutElem(dst, dt, i, benchElem(dt, rng.Float32()*2-1))
		refPutElem(src, dt, i, benchElem(dt, rng.Float32()*2-1))
	}
	return dst, src
}

// benchSize names a byte count in KiB or MiB.
func benchSize(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// benchElem encodes f as a dt element for benchmarks.
func benchElem(dt DataType, f float32) uint64 {
	switch dt {
	case Float16:
		return uint64(Float32ToFloat16(f))
	case Bfloat16:
		return uint64(Float32ToBfloat16(f))
	case Float64:
		return math.Float64bits(float64(f))
	case Int32:
		return uint64(uint32(int32(f * 1000)))
	default:
		return uint64(math.Float32bits(f))
	}
}
