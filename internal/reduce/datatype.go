package reduce

import "strconv"

// DataType identifies the element type of a buffer taking part in a
// collective.
//
// DataType numbers follow NCCL's ncclDataType_t, so values coming from the
// C API can be converted directly.
type DataType uint8

// Element types, numbered as in NCCL's ncclDataType_t.
const (
	// Int8 is a signed 8-bit integer.
	Int8 DataType = 0
	// Uint8 is an unsigned 8-bit integer.
	Uint8 DataType = 1
	// Int32 is a signed 32-bit integer.
	Int32 DataType = 2
	// Uint32 is an unsigned 32-bit integer.
	Uint32 DataType = 3
	// Int64 is a signed 64-bit integer.
	Int64 DataType = 4
	// Uint64 is an unsigned 64-bit integer.
	Uint64 DataType = 5
	// Float16 is an IEEE 754 binary16 (half precision) float.
	Float16 DataType = 6
	// Float32 is an IEEE 754 binary32 (single precision) float.
	Float32 DataType = 7
	// Float64 is an IEEE 754 binary64 (double precision) float.
	Float64 DataType = 8
	// Bfloat16 is a brain float: the upper 16 bits of a binary32.
	Bfloat16 DataType = 9
	// Float8e4m3 is an 8-bit float with 4 exponent and 3 mantissa bits,
	// finite only (torch.float8_e4m3fn). It takes part in data movement
	// only; see CheckReduction.
	Float8e4m3 DataType = 10
	// Float8e5m2 is an 8-bit float with 5 exponent and 2 mantissa bits
	// (torch.float8_e5m2). It takes part in data movement only; see
	// CheckReduction.
	Float8e5m2 DataType = 11
)

// Element types added by gonccl, numbered far from NCCL's so that they never
// collide with a future ncclDataType_t.
const (
	// Int16 is a signed 16-bit integer.
	Int16 DataType = 64
	// Uint16 is an unsigned 16-bit integer.
	Uint16 DataType = 65
	// Bool is one byte holding 0 (false) or 1 (true). Reductions read any
	// non-zero byte as true and always write 0 or 1.
	Bool DataType = 66
	// Complex64 is a pair of float32: the real part, then the imaginary
	// part (C float complex, Go complex64).
	Complex64 DataType = 67
	// Complex128 is a pair of float64: the real part, then the imaginary
	// part (C double complex, Go complex128).
	Complex128 DataType = 68
)

// dataTypeSizes gives the element size of every valid DataType and 0 for
// every other value; the valid set is sparse.
var dataTypeSizes = [256]uint8{
	Int8:       1,
	Uint8:      1,
	Int32:      4,
	Uint32:     4,
	Int64:      8,
	Uint64:     8,
	Float16:    2,
	Float32:    4,
	Float64:    8,
	Bfloat16:   2,
	Float8e4m3: 1,
	Float8e5m2: 1,
	Int16:      2,
	Uint16:     2,
	Bool:       1,
	Complex64:  8,
	Complex128: 16,
}

var dataTypeNames = [256]string{
	Int8:       "int8",
	Uint8:      "uint8",
	Int32:      "int32",
	Uint32:     "uint32",
	Int64:      "int64",
	Uint64:     "uint64",
	Float16:    "float16",
	Float32:    "float32",
	Float64:    "float64",
	Bfloat16:   "bfloat16",
	Float8e4m3: "float8_e4m3fn",
	Float8e5m2: "float8_e5m2",
	Int16:      "int16",
	Uint16:     "uint16",
	Bool:       "bool",
	Complex64:  "complex64",
	Complex128: "complex128",
}

// Size returns the number of bytes in one element of type d, or 0 if d is
// not a valid DataType.
func (d DataType) Size() int {
	return int(dataTypeSizes[d])
}

// Valid reports whether d is one of the defined DataType constants.
func (d DataType) Valid() bool {
	return dataTypeSizes[d] != 0
}

// String returns the torch-style name of d ("float32", "float8_e4m3fn",
// "complex64", ...), or "datatype(N)" if d is not valid.
func (d DataType) String() string {
	if !d.Valid() {
		return "datatype(" + strconv.Itoa(int(d)) + ")"
	}
	return dataTypeNames[d]
}

// IsFloat reports whether d is a real floating-point type: Float16,
// Float32, Float64, Bfloat16, Float8e4m3 or Float8e5m2. As with torch's
// is_floating_point, it is false for Complex64 and Complex128, whose parts are
// floats but whose values are not ordered; use IsComplex for those. It is
// false for integer, Bool and invalid types.
func (d DataType) IsFloat() bool {
	switch d {
	case Float16, Float32, Float64, Bfloat16, Float8e4m3, Float8e5m2:
		return true
	}
	return false
}

// IsComplex reports whether d is Complex64 or Complex128.
func (d DataType) IsComplex() bool {
	return d == Complex64 || d == Complex128
}

// IsInteger reports whether d is a signed or unsigned integer type (Int8
// through Uint64, Int16, Uint16). It is false for Bool.
func (d DataType) IsInteger() bool {
	switch d {
	case Int8, Uint8, Int16, Uint16, Int32, Uint32, Int64, Uint64:
		return true
	}
	return false
}

// RedOp is the element-wise operation applied by reducing collectives.
//
// RedOp numbers follow NCCL's ncclRedOp_t, so values coming from the C API can
// be converted directly.
type RedOp uint8

// Reduction operations, numbered as in NCCL's ncclRedOp_t.
const (
	// Sum adds elements; integers wrap around on overflow.
	Sum RedOp = 0
	// Prod multiplies elements; integers wrap around on overflow.
	Prod RedOp = 1
	// Max keeps the larger element; a NaN operand makes the result NaN.
	Max RedOp = 2
	// Min keeps the smaller element; a NaN operand makes the result NaN.
	Min RedOp = 3
	// Avg adds elements and divides the total by the number of ranks once
	// at the end.
	Avg RedOp = 4
)

// Bitwise reduction operations, added by gonccl and numbered far from NCCL's
// so that they never collide with a future ncclRedOp_t. They apply to integer
// types and Bool only.
const (
	// Band is bitwise and (logical and for Bool).
	Band RedOp = 64
	// Bor is bitwise or (logical or for Bool).
	Bor RedOp = 65
	// Bxor is bitwise exclusive or (logical exclusive or for Bool).
	Bxor RedOp = 66
)

// redOpNames names every valid RedOp and is empty for every other value;
// the valid set is sparse.
var redOpNames = [256]string{
	Sum:  "sum",
	Prod: "prod",
	Max:  "max",
	Min:  "min",
	Avg:  "avg",
	Band: "band",
	Bor:  "bor",
	Bxor: "bxor",
}

// Valid reports whether o is one of the defined RedOp constants.
func (o RedOp) Valid() bool {
	return redOpNames[o] != ""
}

// String returns the lower-case name of o ("sum", "prod", "band", ...), or
// "redop(N)" if o is not valid.
func (o RedOp) String() string {
	if !o.Valid() {
		return "redop(" + strconv.Itoa(int(o)) + ")"
	}
	return redOpNames[o]
}

// isBitwise reports whether o is Band, Bor or Bxor.
func (o RedOp) isBitwise() bool {
	return o == Band || o == Bor || o == Bxor
}
