package core

import "github.com/gonccl/gonccl/internal/reduce"

// The element types and reductions live in internal/reduce; core re-exports them, so
// that callers (capi, cuda, tests) name them core.Float32, core.Sum, core.ReduceInto.

// DataType identifies the element type of a buffer taking part in a collective. Its
// numbers follow NCCL's ncclDataType_t, so values coming from the C API can be
// converted directly; see reduce.DataType.
type DataType = reduce.DataType

// RedOp is the element-wise operation applied by reducing collectives. Its numbers
// follow NCCL's ncclRedOp_t; see reduce.RedOp.
type RedOp = reduce.RedOp

// Element types (see the reduce package for each one's layout).
const (
	Int8       = reduce.Int8
	Uint8      = reduce.Uint8
	Int32      = reduce.Int32
	Uint32     = reduce.Uint32
	Int64      = reduce.Int64
	Uint64     = reduce.Uint64
	Float16    = reduce.Float16
	Float32    = reduce.Float32
	Float64    = reduce.Float64
	Bfloat16   = reduce.Bfloat16
	Float8e4m3 = reduce.Float8e4m3
	Float8e5m2 = reduce.Float8e5m2
	Int16      = reduce.Int16
	Uint16     = reduce.Uint16
	Bool       = reduce.Bool
	Complex64  = reduce.Complex64
	Complex128 = reduce.Complex128
)

// Reduction operations (see the reduce package for each one's rules).
const (
	Sum  = reduce.Sum
	Prod = reduce.Prod
	Max  = reduce.Max
	Min  = reduce.Min
	Avg  = reduce.Avg
	Band = reduce.Band
	Bor  = reduce.Bor
	Bxor = reduce.Bxor
)

// CheckReduction reports whether reductions with op are defined on elements of type
// dt; see reduce.CheckReduction for the table.
func CheckReduction(dt DataType, op RedOp) error { return reduce.CheckReduction(dt, op) }

// ReduceInto sets dst[i] = op(dst[i], src[i]) for every element of the raw buffers dst
// and src; see reduce.ReduceInto.
func ReduceInto(dst, src []byte, dt DataType, op RedOp) error {
	return reduce.ReduceInto(dst, src, dt, op)
}

// DivideBy divides every element of buf by n in place, finishing an Avg reduction; see
// reduce.DivideBy.
func DivideBy(buf []byte, dt DataType, n int) error { return reduce.DivideBy(buf, dt, n) }

// Float16ToFloat32 converts the IEEE half-precision value with bit pattern h to float32.
func Float16ToFloat32(h uint16) float32 { return reduce.Float16ToFloat32(h) }

// Float32ToFloat16 converts f to the bit pattern of the nearest half-precision value.
func Float32ToFloat16(f float32) uint16 { return reduce.Float32ToFloat16(f) }

// Bfloat16ToFloat32 converts the bfloat16 value with bit pattern b to float32.
func Bfloat16ToFloat32(b uint16) float32 { return reduce.Bfloat16ToFloat32(b) }

// Float32ToBfloat16 converts f to the bit pattern of the nearest bfloat16 value.
func Float32ToBfloat16(f float32) uint16 { return reduce.Float32ToBfloat16(f) }
