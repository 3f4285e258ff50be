package reduce

import "encoding/binary"

// Bool elements are bytes read as false when zero and true otherwise; every
// result is written as 0 or 1. Sum and Max are logical or, Prod and Min
// logical and (the integer ops restricted to {0, 1}, as torch maps them).

// reduceBool applies op element-wise to bool bytes of equal length, eight at
// a time. op must not be Avg (CheckReduction rejects it).
func reduceBool(d, s []byte, op RedOp) {
	s = s[:len(d)]
	for len(d) >= 8 && len(s) >= 8 {
		x := nonZeroBytes(binary.NativeEndian.Uint64(d))
		y := nonZeroBytes(binary.NativeEndian.Uint64(s))
		binary.NativeEndian.PutUint64(d, boolBytes(op, x, y))
		d, s = d[8:], s[8:]
	}
	s = s[:len(d)]
	for i := range d {
		d[i] = byte(boolBytes(op, nonZeroBytes(uint64(d[i])), nonZeroBytes(uint64(s[i]))))
	}
}

// nonZeroBytes maps every non-zero byte of x to 1 and every zero byte to 0.
// Adding 0x7f to the low seven bits of a byte carries into its top bit
// exactly when they are not all zero, and never into the next byte.
func nonZeroBytes(x uint64) uint64 {
	const low7, ones = 0x7f7f7f7f7f7f7f7f, 0x0101010101010101
	return (((x & low7) + low7) | x) >> 7 & ones
}

// boolBytes applies op to x and y, whose bytes are each 0 or 1.
func boolBytes(op RedOp, x, y uint64) uint64 {
	switch op {
	case Sum, Max, Bor:
		return x | y
	case Prod, Min, Band:
		return x & y
	}
	return x ^ y // Bxor
}
