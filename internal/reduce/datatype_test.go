package reduce

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDataType(t *testing.T) {
	tests := []struct {
		dt      DataType
		num     uint8 // ncclDataType_t value
		size    int
		name    string
		valid   bool
		isFloat bool
		isInt   bool
		isCplx  bool
	}{
		{Int8, 0, 1, "int8", true, false, true, false},
		{Uint8, 1, 1, "uint8", true, false, true, false},
		{Int32, 2, 4, "int32", true, false, true, false},
		{Uint32, 3, 4, "uint32", true, false, true, false},
		{Int64, 4, 8, "int64", true, false, true, false},
		{Uint64, 5, 8, "uint64", true, false, true, false},
		{Float16, 6, 2, "float16", true, true, false, false},
		{Float32, 7, 4, "float32", true, true, false, false},
		{Float64, 8, 8, "float64", true, true, false, false},
		{Bfloat16, 9, 2, "bfloat16", true, true, false, false},
		{Float8e4m3, 10, 1, "float8_e4m3fn", true, true, false, false},
		{Float8e5m2, 11, 1, "float8_e5m2", true, true, false, false},
		{Int16, 64, 2, "int16", true, false, true, false},
		{Uint16, 65, 2, "uint16", true, false, true, false},
		{Bool, 66, 1, "bool", true, false, false, false},
		{Complex64, 67, 8, "complex64", true, false, false, true},
		{Complex128, 68, 16, "complex128", true, false, false, true},
		{DataType(12), 12, 0, "datatype(12)", false, false, false, false},
		{DataType(63), 63, 0, "datatype(63)", false, false, false, false},
		{DataType(69), 69, 0, "datatype(69)", false, false, false, false},
		{DataType(255), 255, 0, "datatype(255)", false, false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.num, uint8(tt.dt))
			require.Equal(t, tt.size, tt.dt.Size())
			require.Equal(t, tt.name, tt.dt.String())
			require.Equal(t, tt.valid, tt.dt.Valid())
			require.Equal(t, tt.isFloat, tt.dt.IsFloat())
			require.Equal(t, tt.isInt, tt.dt.IsInteger())
			require.Equal(t, tt.isCplx, tt.dt.IsComplex())
		})
	}
}

func TestDataTypeValidSetIsExactlyTheConstants(t *testing.T) {
	var valid []DataType
	for d := range 256 {
		if DataType(d).Valid() {
			valid = append(valid, DataType(d))
		}
	}
	require.ElementsMatch(t, allDataTypes, valid)
}

func TestRedOpValidSetIsExactlyTheConstants(t *testing.T) {
	var valid []RedOp
	for o := range 256 {
		if RedOp(o).Valid() {
			valid = append(valid, RedOp(o))
		}
	}
	require.ElementsMatch(t, allRedOps, valid)
}

func TestDataTypeConstantsAreTyped(t *testing.T) {
	// Every constant must carry the DataType type (not untyped int).
	for _, v := range []any{
		Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16,
		Float8e4m3, Float8e5m2, Int16, Uint16, Bool, Complex64, Complex128,
	} {
		require.IsType(t, DataType(0), v)
	}
	for _, v := range []any{Sum, Prod, Max, Min, Avg, Band, Bor, Bxor} {
		require.IsType(t, RedOp(0), v)
	}
}

func TestRedOp(t *testing.T) {
	tests := []struct {
		op    RedOp
		num   uint8 // ncclRedOp_t value
		name  string
		valid bool
	}{
		{Sum, 0, "sum", true},
		{Prod, 1, "prod", true},
		{Max, 2, "max", true},
		{Min, 3, "min", true},
		{Avg, 4, "avg", true},
		{Band, 64, "band", true},
		{Bor, 65, "bor", true},
		{Bxor, 66, "bxor", true},
		{RedOp(5), 5, "redop(5)", false},
		{RedOp(63), 63, "redop(63)", false},
		{RedOp(67), 67, "redop(67)", false},
		{RedOp(200), 200, "redop(200)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.num, uint8(tt.op))
			require.Equal(t, tt.name, tt.op.String())
			require.Equal(t, tt.valid, tt.op.Valid())
		})
	}
}
