package reduce

import (
	"fmt"
	"math"
	"unsafe"
)

// Floating-point reductions canonicalize NaN: every NaN they produce is the
// positive quiet NaN with only the top mantissa bit set (float32 0x7fc00000,
// float64 0x7ff8000000000000, half 0x7e00, bfloat16 0x7fc0). Hardware picks
// the payload of one NaN operand depending on operand order and architecture;
// canonicalizing makes every op bitwise commutative, so all ranks end up with
// identical bits whatever order they combined their inputs in.

const (
	// f64QuietNaN is the canonical quiet float64 NaN.
	f64QuietNaN = 0x7ff8000000000000
)

// integer is the set of Go types backing the integer DataTypes.
type integer interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64
}

// ReduceInto sets dst[i] = op(dst[i], src[i]) for every element. dst and src
// are raw memory holding len(dst)/dt.Size() elements of type dt in native byte
// order, aligned for dt; they must have the same length, a whole number of
// elements, and must not partially overlap (dst and src may be the same
// slice). Avg reduces like Sum; the caller divides once at the end with
// DivideBy. CheckReduction lists the (dt, op) pairs that are defined.
//
// Integer Sum and Prod wrap around (two's complement); Band, Bor and Bxor
// act on the bits. Float16 and Bfloat16 elements are widened to float32,
// combined, and rounded back once to nearest even. Max and Min return NaN if
// either operand is NaN and order -0 below +0. Bool ops are logical (see
// Bool) and write 0 or 1. Complex Sum adds the parts; complex Prod multiplies
// without fused multiply-adds (see complex.go). Every NaN result, or NaN part
// of a complex result, is canonical, so op(a, b) and op(b, a) give identical
// bits for all inputs.
//
// On x86-64 CPUs with AVX2 and F16C, large buffers of integers and real
// floats go to vector kernels (kernels_amd64.c) that give the same
// bits as the loops below, which remain the portable fallback.
//
// ReduceInto does not allocate unless it returns an error. Errors wrap
// ErrInvalidArgument or ErrNotSupported (see CheckReduction) and leave dst
// unchanged.
func ReduceInto(dst, src []byte, dt DataType, op RedOp) error {
	if err := Check("ReduceInto", dt, op); err != nil {
		return err
	}
	if len(dst) != len(src) {
		return fmt.Errorf("%w: ReduceInto: dst has %d bytes but src has %d", ErrInvalidArgument, len(dst), len(src))
	}
	size := dt.Size()
	if len(dst)%size != 0 {
		return fmt.Errorf("%w: ReduceInto: %d bytes is not a whole number of %v elements", ErrInvalidArgument, len(dst), dt)
	}
	n := len(dst) / size
	if n == 0 || reduceVector(dst, src, n, dt, op) {
		return nil
	}
	switch dt {
	case Int8:
		reduceInts(viewAs[int8](dst, n), viewAs[int8](src, n), op)
	case Uint8:
		reduceInts(dst, src, op)
	case Int16:
		reduceInts(viewAs[int16](dst, n), viewAs[int16](src, n), op)
	case Uint16:
		reduceInts(viewAs[uint16](dst, n), viewAs[uint16](src, n), op)
	case Int32:
		reduceInts(viewAs[int32](dst, n), viewAs[int32](src, n), op)
	case Uint32:
		reduceInts(viewAs[uint32](dst, n), viewAs[uint32](src, n), op)
	case Int64:
		reduceInts(viewAs[int64](dst, n), viewAs[int64](src, n), op)
	case Uint64:
		reduceInts(viewAs[uint64](dst, n), viewAs[uint64](src, n), op)
	case Float16:
		reduceF16(viewAs[uint16](dst, n), viewAs[uint16](src, n), op)
	case Float32:
		reduceF32(viewAs[float32](dst, n), viewAs[float32](src, n), op)
	case Float64:
		reduceF64(viewAs[float64](dst, n), viewAs[float64](src, n), op)
	case Bfloat16:
		reduceBF16(viewAs[uint16](dst, n), viewAs[uint16](src, n), op)
	case Bool:
		reduceBool(dst, src, op)
	case Complex64:
		reduceC64(viewAs[complex64](dst, n), viewAs[complex64](src, n), op)
	case Complex128:
		reduceC128(viewAs[complex128](dst, n), viewAs[complex128](src, n), op)
	}
	return nil
}

// DivideBy divides every element of buf (raw memory holding elements of type
// dt, as for ReduceInto) by n in place; it finishes an Avg reduction. Floats
// use true division (Float16 and Bfloat16 are divided in float32 and rounded
// back to nearest even; complex types divide both parts) with NaN results
// canonicalized as in ReduceInto; integers truncate toward zero. n must be
// positive, and dt must support Avg (CheckReduction). Errors wrap
// ErrInvalidArgument or ErrNotSupported and leave buf unchanged.
func DivideBy(buf []byte, dt DataType, n int) error {
	if err := Check("DivideBy", dt, Avg); err != nil {
		return err
	}
	if n <= 0 {
		return fmt.Errorf("%w: DivideBy: divisor %d is not positive", ErrInvalidArgument, n)
	}
	size := dt.Size()
	if len(buf)%size != 0 {
		return fmt.Errorf("%w: DivideBy: %d bytes is not a whole number of %v elements", ErrInvalidArgument, len(buf), dt)
	}
	count := len(buf) / size
	if count == 0 || divideVector(buf, count, dt, n) {
		return nil
	}
	switch dt {
	case Int8:
		divideSigned(viewAs[int8](buf, count), n)
	case Uint8:
		divideUnsigned(buf, n)
	case Int16:
		divideSigned(viewAs[int16](buf, count), n)
	case Uint16:
		divideUnsigned(viewAs[uint16](buf, count), n)
	case Int32:
		divideSigned(viewAs[int32](buf, count), n)
	case Uint32:
		divideUnsigned(viewAs[uint32](buf, count), n)
	case Int64:
		divideSigned(viewAs[int64](buf, count), n)
	case Uint64:
		divideUnsigned(viewAs[uint64](buf, count), n)
	case Float16:
		s := viewAs[uint16](buf, count)
		d := float32(n)
		for i, v := range s {
			s[i] = Float32ToFloat16(canonF32(Float16ToFloat32(v) / d))
		}
	case Float32:
		s := viewAs[float32](buf, count)
		d := float32(n)
		for i, v := range s {
			s[i] = canonF32(v / d)
		}
	case Float64:
		s := viewAs[float64](buf, count)
		d := float64(n)
		for i, v := range s {
			s[i] = canonF64(v / d)
		}
	case Bfloat16:
		s := viewAs[uint16](buf, count)
		d := float32(n)
		for i, v := range s {
			s[i] = Float32ToBfloat16(Bfloat16ToFloat32(v) / d)
		}
	case Complex64:
		divideC64(viewAs[complex64](buf, count), n)
	case Complex128:
		divideC128(viewAs[complex128](buf, count), n)
	}
	return nil
}

// divideSigned divides every element of s by n (positive), truncating toward zero.
func divideSigned[T ~int8 | ~int16 | ~int32 | ~int64](s []T, n int) {
	for i, v := range s {
		s[i] = T(int64(v) / int64(n))
	}
}

// divideUnsigned divides every element of s by n (positive), rounding down.
func divideUnsigned[T ~uint8 | ~uint16 | ~uint32 | ~uint64](s []T, n int) {
	for i, v := range s {
		s[i] = T(uint64(v) / uint64(n))
	}
}

// viewAs reinterprets the first n*sizeof(T) bytes of b as a []T without
// copying. b must be aligned for T and hold at least n elements.
func viewAs[T any](b []byte, n int) []T {
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// canonF32 returns f, or the canonical quiet NaN if f is any NaN.
func canonF32(f float32) float32 {
	if f != f {
		return math.Float32frombits(f32QuietNaN)
	}
	return f
}

// canonF64 returns f, or the canonical quiet NaN if f is any NaN.
func canonF64(f float64) float64 {
	if f != f {
		return math.Float64frombits(f64QuietNaN)
	}
	return f
}

// reduceInts applies op element-wise to integer slices of equal length.
func reduceInts[T integer](d, s []T, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] += s[i]
		}
	case Prod:
		for i := range d {
			d[i] *= s[i]
		}
	case Max:
		for i := range d {
			d[i] = max(d[i], s[i])
		}
	case Min:
		for i := range d {
			d[i] = min(d[i], s[i])
		}
	case Band:
		for i := range d {
			d[i] &= s[i]
		}
	case Bor:
		for i := range d {
			d[i] |= s[i]
		}
	case Bxor:
		for i := range d {
			d[i] ^= s[i]
		}
	}
}

// reduceF32 applies op element-wise to float32 slices of equal length.
func reduceF32(d, s []float32, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		sumF32(d, s)
	case Prod:
		for i := range d {
			d[i] = canonF32(d[i] * s[i])
		}
	case Max:
		// The max builtin already returns NaN for a NaN operand and
		// orders -0 below +0; only the NaN payload needs fixing.
		for i := range d {
			d[i] = canonF32(max(d[i], s[i]))
		}
	case Min:
		for i := range d {
			d[i] = canonF32(min(d[i], s[i]))
		}
	}
}

// sumF32 adds s into d four elements at a time; len(s) must be len(d).
func sumF32(d, s []float32) {
	for len(d) >= 4 && len(s) >= 4 {
		r0 := d[0] + s[0]
		r1 := d[1] + s[1]
		r2 := d[2] + s[2]
		r3 := d[3] + s[3]
		// One test for all four: any NaN among them makes this NaN.
		// Infinities of opposite sign give a false alarm, which the
		// per-element fix-up handles correctly.
		if t := (r0 + r1) + (r2 + r3); t != t {
			r0, r1, r2, r3 = canonF32(r0), canonF32(r1), canonF32(r2), canonF32(r3)
		}
		d[0], d[1], d[2], d[3] = r0, r1, r2, r3
		d, s = d[4:], s[4:]
	}
	s = s[:len(d)]
	for i := range d {
		d[i] = canonF32(d[i] + s[i])
	}
}

// reduceF64 applies op element-wise to float64 slices of equal length.
func reduceF64(d, s []float64, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = canonF64(d[i] + s[i])
		}
	case Prod:
		for i := range d {
			d[i] = canonF64(d[i] * s[i])
		}
	case Max:
		for i := range d {
			d[i] = canonF64(max(d[i], s[i]))
		}
	case Min:
		for i := range d {
			d[i] = canonF64(min(d[i], s[i]))
		}
	}
}

// reduceF16 applies op element-wise to half-precision slices of equal
// length, computing in float32 and rounding once. canonF32 makes every NaN
// positive, so Float32ToFloat16 turns it into the canonical 0x7e00.
func reduceF16(d, s []uint16, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = Float32ToFloat16(canonF32(Float16ToFloat32(d[i]) + Float16ToFloat32(s[i])))
		}
	case Prod:
		for i := range d {
			d[i] = Float32ToFloat16(canonF32(Float16ToFloat32(d[i]) * Float16ToFloat32(s[i])))
		}
	case Max:
		for i := range d {
			d[i] = Float32ToFloat16(canonF32(max(Float16ToFloat32(d[i]), Float16ToFloat32(s[i]))))
		}
	case Min:
		for i := range d {
			d[i] = Float32ToFloat16(canonF32(min(Float16ToFloat32(d[i]), Float16ToFloat32(s[i]))))
		}
	}
}

// reduceBF16 applies op element-wise to bfloat16 slices of equal length,
// computing in float32 and rounding once. Float32ToBfloat16 already maps
// every NaN to the canonical one.
func reduceBF16(d, s []uint16, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Avg:
		for i := range d {
			d[i] = Float32ToBfloat16(Bfloat16ToFloat32(d[i]) + Bfloat16ToFloat32(s[i]))
		}
	case Prod:
		for i := range d {
			d[i] = Float32ToBfloat16(Bfloat16ToFloat32(d[i]) * Bfloat16ToFloat32(s[i]))
		}
	case Max:
		for i := range d {
			d[i] = Float32ToBfloat16(max(Bfloat16ToFloat32(d[i]), Bfloat16ToFloat32(s[i])))
		}
	case Min:
		for i := range d {
			d[i] = Float32ToBfloat16(min(Bfloat16ToFloat32(d[i]), Bfloat16ToFloat32(s[i])))
		}
	}
}
