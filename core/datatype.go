package core

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
)

// numDataTypes is one past the largest valid DataType.
const numDataTypes = 10

var dataTypeSizes = [numDataTypes]uint8{
	Int8:     1,
	Uint8:    1,
	Int32:    4,
	Uint32:   4,
	Int64:    8,
	Uint64:   8,
	Float16:  2,
	Float32:  4,
	Float64:  8,
	Bfloat16: 2,
}

var dataTypeNames = [numDataTypes]string{
	Int8:     "int8",
	Uint8:    "uint8",
	Int32:    "int32",
	Uint32:   "uint32",
	Int64:    "int64",
	Uint64:   "uint64",
	Float16:  "float16",
	Float32:  "float32",
	Float64:  "float64",
	Bfloat16: "bfloat16",
}

// Size returns the number of bytes in one element of type d, or 0 if d is
// not a valid DataType.
func (d DataType) Size() int {
	if !d.Valid() {
		return 0
	}
	return int(dataTypeSizes[d])
}

// Valid reports whether d is one of the defined DataType constants.
func (d DataType) Valid() bool {
	return d < numDataTypes
}

// String returns the torch-style name of d ("float32", "bfloat16", ...), or
// "datatype(N)" if d is not valid.
func (d DataType) String() string {
	if !d.Valid() {
		return "datatype(" + strconv.Itoa(int(d)) + ")"
	}
	return dataTypeNames[d]
}

// IsFloat reports whether d is a floating-point type (Float16, Float32,
// Float64 or Bfloat16). It is false for integer and invalid types.
func (d DataType) IsFloat() bool {
	switch d {
	case Float16, Float32, Float64, Bfloat16:
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

// numRedOps is one past the largest valid RedOp.
const numRedOps = 5

var redOpNames = [numRedOps]string{
	Sum:  "sum",
	Prod: "prod",
	Max:  "max",
	Min:  "min",
	Avg:  "avg",
}

// Valid reports whether o is one of the defined RedOp constants.
func (o RedOp) Valid() bool {
	return o < numRedOps
}

// String returns the lower-case name of o ("sum", "prod", ...), or
// "redop(N)" if o is not valid.
func (o RedOp) String() string {
	if !o.Valid() {
		return "redop(" + strconv.Itoa(int(o)) + ")"
	}
	return redOpNames[o]
}
