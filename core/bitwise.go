package core

// Bool elements are bytes read as false when zero and true otherwise; every
// result is written as 0 or 1. Sum and Max are logical or, Prod and Min
// logical and (the integer ops restricted to {0, 1}, as torch maps them).

// reduceBool applies op element-wise to bool bytes of equal length. op must
// not be Avg (CheckReduction rejects it).
func reduceBool(d, s []byte, op RedOp) {
	s = s[:len(d)]
	switch op {
	case Sum, Max, Bor:
		for i := range d {
			d[i] = boolByte(d[i]|s[i] != 0)
		}
	case Prod, Min, Band:
		for i := range d {
			d[i] = boolByte(d[i] != 0 && s[i] != 0)
		}
	case Bxor:
		for i := range d {
			d[i] = boolByte((d[i] != 0) != (s[i] != 0))
		}
	}
}

// boolByte returns 1 for true and 0 for false.
func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
