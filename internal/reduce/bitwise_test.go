package reduce

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
	// Any non-zero byte is true; results are always 0 or 1. Five copies of
	// the table reach both the eight-byte and the byte-at-a-time loop.
	for _, trueByte := range []byte{1, 2, 0x80, 0xff} {
		for op, w := range want {
			t.Run(fmt.Sprintf("%v/true=%#x", op, trueByte), func(t *testing.T) {
				var dst, src, wantBuf []byte
				for range 5 {
					dst = append(dst, 0, 0, trueByte, trueByte)
					src = append(src, 0, trueByte, 0, trueByte)
					wantBuf = append(wantBuf, w[:]...)
				}
				require.NoError(t, ReduceInto(dst, src, Bool, op))
				require.Equal(t, wantBuf, dst)
			})
		}
	}
}

func TestBitwiseNonZeroBytes(t *testing.T) {
	for b := range 256 {
		for pos := range 8 {
			x := uint64(b) << (8 * pos)
			var want uint64
			if b != 0 {
				want = 1 << (8 * pos)
			}
			require.Equalf(t, want, nonZeroBytes(x), "byte %#x at %d", b, pos)
			// Neighbours must not leak into each other.
			all := x | 0x8080808080808080&^(0xff<<(8*pos))
			require.Equalf(t, want|0x0101010101010101&^(0xff<<(8*pos)), nonZeroBytes(all), "byte %#x at %d among 0x80s", b, pos)
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
