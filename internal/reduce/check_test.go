package reduce

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// wantReductionOps is the hand-written table (WantReductionOps) that
// CheckReduction must agree with.
var wantReductionOps = WantReductionOps

// wantReductionErr returns the sentinel CheckReduction(dt, op) must wrap, or
// nil.
func wantReductionErr(dt DataType, op RedOp) error {
	if !dt.Valid() || !op.Valid() {
		return ErrInvalidArgument
	}
	if dt == Float8e4m3 || dt == Float8e5m2 {
		return ErrNotSupported
	}
	for _, o := range wantReductionOps[dt] {
		if o == op {
			return nil
		}
	}
	return ErrInvalidArgument
}

func TestCheckReductionTable(t *testing.T) {
	// Every one of the 256x256 values, valid or not.
	for d := range 256 {
		for o := range 256 {
			dt, op := DataType(d), RedOp(o)
			want := wantReductionErr(dt, op)
			err := CheckReduction(dt, op)
			if want == nil {
				require.NoError(t, err, "%v/%v", dt, op)
				continue
			}
			require.ErrorIs(t, err, want, "%v/%v", dt, op)
			other := ErrNotSupported
			if want == ErrNotSupported {
				other = ErrInvalidArgument
			}
			require.NotErrorIs(t, err, other, "%v/%v", dt, op)
		}
	}
	// The table above lists every valid type but the float8 ones.
	for _, dt := range allDataTypes {
		_, listed := wantReductionOps[dt]
		require.Equal(t, dt != Float8e4m3 && dt != Float8e5m2, listed, "%v", dt)
	}
	require.Len(t, wantReductionOps, len(allDataTypes)-2)
}

func TestCheckReductionMessages(t *testing.T) {
	tests := []struct {
		dt   DataType
		op   RedOp
		want string
	}{
		{Float32, Bxor, "invalid argument: bxor is not defined for float32; bitwise ops need an integer or bool type"},
		{Bfloat16, Band, "invalid argument: band is not defined for bfloat16; bitwise ops need an integer or bool type"},
		{Complex128, Bor, "invalid argument: bor is not defined for complex128; bitwise ops need an integer or bool type"},
		{Complex64, Max, "invalid argument: max is not defined for complex64: complex numbers are not ordered; use sum, prod or avg"},
		{Complex128, Min, "invalid argument: min is not defined for complex128: complex numbers are not ordered; use sum, prod or avg"},
		{Bool, Avg, "invalid argument: avg is not defined for bool; use sum (logical or), prod (logical and) or a numeric type"},
		{Float8e4m3, Sum, "not supported: reductions on float8_e4m3fn are not supported; all_gather/broadcast and other data movement are"},
		{Float8e5m2, Band, "not supported: reductions on float8_e5m2 are not supported; all_gather/broadcast and other data movement are"},
		{DataType(12), Sum, "invalid argument: unknown data type 12"},
		{Int32, RedOp(5), "invalid argument: unknown reduction op 5"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v", tt.dt, tt.op), func(t *testing.T) {
			require.EqualError(t, CheckReduction(tt.dt, tt.op), tt.want)
		})
	}
	// ReduceInto and DivideBy name themselves after the sentinel.
	buf := alignedBytes(8)
	require.EqualError(t, ReduceInto(buf, buf, Float32, Bxor),
		"invalid argument: ReduceInto: bxor is not defined for float32; bitwise ops need an integer or bool type")
	require.EqualError(t, DivideBy(buf, Bool, 2),
		"invalid argument: DivideBy: avg is not defined for bool; use sum (logical or), prod (logical and) or a numeric type")
}

// TestCheckReductionGuardsKernels checks that ReduceInto and DivideBy obey the
// table: every valid pair either reduces or fails with the table's error and
// leaves its buffers alone.
func TestCheckReductionGuardsKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for _, dt := range allDataTypes {
		for _, op := range allRedOps {
			want := wantReductionErr(dt, op)
			dst := randBuf(rng, dt, 5, false)
			src := randBuf(rng, dt, 5, false)
			before := append([]byte(nil), dst...)
			err := ReduceInto(dst, src, dt, op)
			if want == nil {
				require.NoError(t, err, "%v/%v", dt, op)
				continue
			}
			require.ErrorIs(t, err, want, "%v/%v", dt, op)
			require.Equal(t, before, dst, "%v/%v: dst changed on error", dt, op)
		}
		want := wantReductionErr(dt, Avg)
		buf := randBuf(rng, dt, 5, false)
		before := append([]byte(nil), buf...)
		err := DivideBy(buf, dt, 3)
		if want == nil {
			require.NoError(t, err, "DivideBy %v", dt)
			continue
		}
		require.ErrorIs(t, err, want, "DivideBy %v", dt)
		require.Equal(t, before, buf, "DivideBy %v: buf changed on error", dt)
	}
}

func TestCheckReductionDoesNotAllocate(t *testing.T) {
	for _, p := range supportedPairs() {
		allocs := testing.AllocsPerRun(10, func() {
			if CheckReduction(p.dt, p.op) != nil {
				panic(p)
			}
		})
		require.Zerof(t, allocs, "%v allocates", p)
	}
}
