package reduce

import "fmt"

// CheckReduction reports whether reductions with op are defined on elements
// of type dt. It is the one place that says which (type, op) pairs gonccl
// reduces; ReduceInto, DivideBy and the reducing collectives all ask it.
//
//	type                            sum  prod  max  min  avg  band  bor  bxor
//	int8 ... uint64, int16, uint16  yes  yes   yes  yes  yes  yes   yes  yes
//	float16/32/64, bfloat16         yes  yes   yes  yes  yes  -     -    -
//	bool                            or   and   or   and  -    and   or   xor
//	complex64, complex128           yes  yes   -    -    yes  -     -    -
//	float8_e4m3fn, float8_e5m2      not supported (data movement only)
//
// These follow torch: bool sums and products are logical or and and (as
// ProcessGroupNCCL maps them) and averaging bools is an error; complex
// numbers have no order; bitwise ops need integer or bool elements.
//
// The error wraps ErrInvalidArgument when dt or op is unknown or the pair is
// undefined ("bxor is not defined for float32"), and ErrNotSupported when the
// pair is meaningful but gonccl does not implement it (float8 reductions).
// CheckReduction does not allocate when it returns nil.
func CheckReduction(dt DataType, op RedOp) error {
	return Check("", dt, op)
}

// Check is CheckReduction with the name of the calling operation
// ("all_reduce", "ReduceInto") put in front of the error message, after the
// sentinel; caller may be empty.
func Check(caller string, dt DataType, op RedOp) error {
	switch {
	case !dt.Valid():
		return reductionError(ErrInvalidArgument, caller, "unknown data type %d", uint8(dt))
	case !op.Valid():
		return reductionError(ErrInvalidArgument, caller, "unknown reduction op %d", uint8(op))
	case dt == Float8e4m3 || dt == Float8e5m2:
		return reductionError(ErrNotSupported, caller,
			"reductions on %v are not supported; all_gather/broadcast and other data movement are", dt)
	case op.isBitwise() && !dt.IsInteger() && dt != Bool:
		return reductionError(ErrInvalidArgument, caller,
			"%v is not defined for %v; bitwise ops need an integer or bool type", op, dt)
	case dt.IsComplex() && (op == Max || op == Min):
		return reductionError(ErrInvalidArgument, caller,
			"%v is not defined for %v: complex numbers are not ordered; use sum, prod or avg", op, dt)
	case dt == Bool && op == Avg:
		return reductionError(ErrInvalidArgument, caller,
			"avg is not defined for bool; use sum (logical or), prod (logical and) or a numeric type")
	}
	return nil
}

// reductionError formats an error wrapping sentinel, prefixed by caller
// unless it is empty.
func reductionError(sentinel error, caller, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if caller != "" {
		msg = caller + ": " + msg
	}
	return fmt.Errorf("%w: %s", sentinel, msg)
}
