package core

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
	}{
		{Int8, 0, 1, "int8", true, false},
		{Uint8, 1, 1, "uint8", true, false},
		{Int32, 2, 4, "int32", true, false},
		{Uint32, 3, 4, "uint32", true, false},
		{Int64, 4, 8, "int64", true, false},
		{Uint64, 5, 8, "uint64", true, false},
		{Float16, 6, 2, "float16", true, true},
		{Float32, 7, 4, "float32", true, true},
		{Float64, 8, 8, "float64", true, true},
		{Bfloat16, 9, 2, "bfloat16", true, true},
		{DataType(10), 10, 0, "datatype(10)", false, false},
		{DataType(255), 255, 0, "datatype(255)", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.num, uint8(tt.dt))
			require.Equal(t, tt.size, tt.dt.Size())
			require.Equal(t, tt.name, tt.dt.String())
			require.Equal(t, tt.valid, tt.dt.Valid())
			require.Equal(t, tt.isFloat, tt.dt.IsFloat())
		})
	}
}

func TestDataTypeConstantsAreTyped(t *testing.T) {
	// Every constant must carry the DataType type (not untyped int).
	for _, v := range []any{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16} {
		require.IsType(t, DataType(0), v)
	}
	for _, v := range []any{Sum, Prod, Max, Min, Avg} {
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
		{RedOp(5), 5, "redop(5)", false},
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
