package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBitwiseBoolTruthTables(t *testing.T) {
	// want[op] lists op(false,false), op(false,true), op(true,false),
	// op(true,true).
	want := map[RedOp][4]byte{
		Sum:  {0, 1, 1, 1},
		Max:  {0, 1, 1, 1},
		Bor:  {0, 1, 1, 1},
		Prod: {0, 0, 0, 1},
		Min:  {0, 0, 0, 1},
		Band: {0, 0, 0, 1},
		Bxor: {0, 1, 1, 0},
	}
	require.Len(t, want, len(wantReductionOps[Bool]))
	// Any non-zero byte is true; results are always 0 or 1.
	for _, trueByte := range []byte{1, 2, 0x80, 0xff} {
		for op, w := range want {
			t.Run(fmt.Sprintf("%v/true=%#x", op, trueByte), func(t *testing.T) {
				dst := []byte{0, 0, trueByte, trueByte}
				src := []byte{0, trueByte, 0, trueByte}
				require.NoError(t, ReduceInto(dst, src, Bool, op))
				require.Equal(t, w[:], dst)
			})
		}
	}
}

func TestBitwiseBoolNonCanonicalPairs(t *testing.T) {
	// 1 & 2 is 0 bitwise, but true and true is true.
	dst, src := []byte{1, 2, 0x55}, []byte{2, 1, 0xaa}
	require.NoError(t, ReduceInto(dst, src, Bool, Band))
	require.Equal(t, []byte{1, 1, 1}, dst)
	dst = []byte{1, 2, 0x55}
	require.NoError(t, ReduceInto(dst, src, Bool, Bxor))
	require.Equal(t, []byte{0, 0, 0}, dst)
}
