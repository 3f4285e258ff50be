package reduce

import "math"

// Half (IEEE 754 binary16) and bfloat16 values are carried as their raw bit
// patterns in a uint16. The conversions below follow PyTorch's scalar
// conversions: widening is exact, narrowing rounds to nearest with ties to
// even, overflows to infinity, keeps subnormals and signed zeros, and turns
// every NaN into a quiet NaN. (Widening a half quiets a signalling NaN;
// widening a bfloat16 is a plain 16-bit shift that keeps every bit.)

const (
	// f32QuietNaN is the canonical quiet float32 NaN (positive, only the
	// top mantissa bit set).
	f32QuietNaN = 0x7fc00000
	// f16QuietNaN is the canonical quiet half NaN.
	f16QuietNaN = 0x7e00
	// bf16QuietNaN is the canonical quiet bfloat16 NaN.
	bf16QuietNaN = 0x7fc0

	// f16Rebias moves a half exponent field to the float32 exponent field
	// once the 10-bit mantissa has been shifted into place: (127-15)<<23.
	f16Rebias = (127 - 15) << 23
	// f32Half is the bit pattern of float32 0.5. Adding 0.5 to a value
	// below 2^-14 leaves its multiple of 2^-24 in the low mantissa bits,
	// which is exactly the half subnormal encoding.
	f32Half = 0x3f000000
	// f16MinNormal32 is 2^-14, the smallest normal half, as float32 bits.
	f16MinNormal32 = 0x38800000
	// f16Overflow32 is 65520 as float32 bits: the midpoint between the
	// largest finite half (65504) and 2^16. It and everything above round
	// to infinity.
	f16Overflow32 = 0x477ff000
)

// Float16ToFloat32 converts the IEEE half-precision value with bit pattern h
// to float32. The conversion is exact; a signalling NaN becomes quiet, with
// its sign and payload kept.
func Float16ToFloat32(h uint16) float32 {
	// Shifted into place, the exponent and mantissa fields of h read as a
	// float32 that is 2^112 times too small (the bias difference, 127-15).
	// Scaling by 2^112 fixes normal and subnormal halves alike, exactly.
	a := uint32(h&0x7fff) << 13
	b := math.Float32bits(math.Float32frombits(a) * 0x1p112)
	if a >= 0x7c00<<13 {
		// Infinity or NaN: all-ones exponent, payload kept; set the
		// quiet bit when the mantissa is non-zero (a NaN).
		b = a | 0x7f800000 | ((a&0x7fffff)+0x7fffff)>>1&0x00400000
	}
	return math.Float32frombits(b | uint32(h&0x8000)<<16)
}

// Float32ToFloat16 converts f to the bit pattern of the nearest IEEE
// half-precision value, rounding ties to even. Magnitudes of 65520 and above
// become infinity, tiny values become subnormals or signed zero, and NaN
// becomes the quiet NaN 0x7e00 with the sign of f.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	return uint16(b>>16)&0x8000 | f16Magnitude(b&0x7fffffff)
}

// f16Magnitude rounds the float32 magnitude with bit pattern a (sign bit
// clear) to the nearest half, ties to even, and returns its bits. NaN gives
// the quiet NaN 0x7e00.
func f16Magnitude(a uint32) uint16 {
	if a >= f16MinNormal32 {
		if a >= f16Overflow32 {
			if a > 0x7f800000 {
				return f16QuietNaN
			}
			return 0x7c00
		}
		// Rebias the exponent, then drop 13 mantissa bits rounding to
		// nearest even; a carry out of the mantissa bumps the exponent,
		// which is the correct result.
		a -= f16Rebias
		return uint16((a + 0xfff + (a>>13)&1) >> 13)
	}
	// The float32 addition rounds to a multiple of 2^-24 with ties to even;
	// the low bits are the subnormal (or 0x0400) result.
	return uint16(math.Float32bits(math.Float32frombits(a)+0.5) - f32Half)
}

// Bfloat16ToFloat32 converts the bfloat16 value with bit pattern b to
// float32. The conversion is exact: b becomes the upper 16 bits, so NaN
// payloads (even signalling ones) pass through unchanged.
func Bfloat16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// Float32ToBfloat16 converts f to the bit pattern of the nearest bfloat16
// value, rounding ties to even (values past the largest finite bfloat16 round
// to infinity). NaN becomes the canonical quiet NaN 0x7fc0.
func Float32ToBfloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return bf16QuietNaN
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}
