package reduce

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// complexBits returns the (real, imaginary) bit patterns of element 0 of a
// dt buffer.
func complexBits(buf []byte, dt DataType) [2]uint64 {
	lane, _ := refLanes(dt)
	return [2]uint64{refGetElem(buf, lane, 0), refGetElem(buf, lane, 1)}
}

// complexBuf returns a one-element dt buffer holding re + im*i; NaN parts
// are written with the given payload bits instead of Go's NaN.
func complexBuf(dt DataType, re, im float64, nanBits [2]uint64) []byte {
	buf := alignedBytes(dt.Size())
	lane, _ := refLanes(dt)
	for k, v := range []float64{re, im} {
		var b uint64
		switch {
		case math.IsNaN(v):
			b = nanBits[k]
		case lane == Float32:
			b = uint64(math.Float32bits(float32(v)))
		default:
			b = math.Float64bits(v)
		}
		refPutElem(buf, lane, k, b)
	}
	return buf
}

// wantComplex encodes the expected parts; NaN means the canonical NaN.
func wantComplex(dt DataType, re, im float64) [2]uint64 {
	lane, _ := refLanes(dt)
	return [2]uint64{refEncodeSpecial(lane, re), refEncodeSpecial(lane, im)}
}

func TestComplexKnownValues(t *testing.T) {
	inf, nan, negZero := math.Inf(1), math.NaN(), math.Copysign(0, -1)
	tests := []struct {
		name           string
		op             RedOp
		a, b, c, d     float64 // (a+bi) op (c+di)
		wantRe, wantIm float64
	}{
		{"(1+2i)(3+4i)", Prod, 1, 2, 3, 4, -5, 10},
		{"i*i", Prod, 0, 1, 0, 1, -1, 0},
		{"(-0+0i)(1+0i)", Prod, negZero, 0, 1, 0, negZero, 0},
		{"(-0-0i)(-0-0i)", Prod, negZero, negZero, negZero, negZero, 0, 0},
		{"(-1+0i)(0+0i)", Prod, -1, 0, 0, 0, negZero, 0},
		{"(2-3i)(2+3i)", Prod, 2, -3, 2, 3, 13, 0},
		// The textbook formula, as in torch: no C99 Annex G recovery of
		// infinities.
		{"(inf+0i)(0+1i)", Prod, inf, 0, 0, 1, nan, inf},
		{"(inf+inf*i)(1+0i)", Prod, inf, inf, 1, 0, nan, nan},
		{"NaN*(1+0i)", Prod, nan, 1, 1, 0, nan, nan},
		{"(1+2i)+(3-2i)", Sum, 1, 2, 3, -2, 4, 0},
		{"(-0-0i)+(-0-0i)", Sum, negZero, negZero, negZero, negZero, negZero, negZero},
		{"(-0-0i)+(0+0i)", Avg, negZero, negZero, 0, 0, 0, 0},
		{"(inf+1i)+(-inf+1i)", Sum, inf, 1, -inf, 1, nan, 2},
		{"(1+NaN*i)+(1+0i)", Sum, 1, nan, 1, 0, 2, nan},
	}
	payloads := map[DataType][2]uint64{
		Complex64:  {0xffc00001, 0x7f800003},
		Complex128: {0xfff8000000000001, 0x7ff0000000000003},
	}
	for _, dt := range []DataType{Complex64, Complex128} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%v/%s", dt, tt.name), func(t *testing.T) {
				want := wantComplex(dt, tt.wantRe, tt.wantIm)
				for _, swap := range []bool{false, true} {
					x := complexBuf(dt, tt.a, tt.b, payloads[dt])
					y := complexBuf(dt, tt.c, tt.d, payloads[dt])
					if swap {
						x, y = y, x
					}
					require.NoError(t, ReduceInto(x, y, dt, tt.op))
					require.Equalf(t, want, complexBits(x, dt), "swap=%v", swap)
				}
			})
		}
	}
}

func TestComplexDivideByKnown(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		dt             DataType
		re, im         float64
		n              int
		wantRe, wantIm float64
	}{
		{Complex64, 1, -3, 3, float64(float32(1) / 3), -1},
		{Complex64, nan, 2, 2, nan, 1},
		{Complex64, math.Inf(-1), 0, 5, math.Inf(-1), 0},
		{Complex128, 1, 1, 4, 0.25, 0.25},
		{Complex128, -1, nan, 3, -1.0 / 3, nan},
		{Complex128, math.Copysign(0, -1), 7, 7, math.Copysign(0, -1), 1},
	}
	payload := map[DataType][2]uint64{
		Complex64:  {0xff800001, 0x7fc00005},
		Complex128: {0xfff0000000000001, 0x7ff8000000000005},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%v%+vi/%d", tt.dt, tt.re, tt.im, tt.n), func(t *testing.T) {
			buf := complexBuf(tt.dt, tt.re, tt.im, payload[tt.dt])
			require.NoError(t, DivideBy(buf, tt.dt, tt.n))
			require.Equal(t, wantComplex(tt.dt, tt.wantRe, tt.wantIm), complexBits(buf, tt.dt))
		})
	}
}

// TestComplexProdWithoutFusion multiplies x = a + bi by y = c + di where
// a = d = 1+u and b = -(1+2u), c = 1 (u is the unit roundoff of the part
// type): ad = 1+2u+u^2 rounds to 1+2u, and bc = -(1+2u) exactly, so the
// imaginary part is +0 when each product is rounded but u^2 when ad is fused
// into an FMA. A fused product would also make the result depend on operand
// order.
func TestComplexProdWithoutFusion(t *testing.T) {
	for _, tt := range []struct {
		dt DataType
		u  float64
	}{{Complex64, 0x1p-23}, {Complex128, 0x1p-52}} {
		t.Run(tt.dt.String(), func(t *testing.T) {
			x := complexBuf(tt.dt, 1+tt.u, -(1 + 2*tt.u), [2]uint64{})
			y := complexBuf(tt.dt, 1, 1+tt.u, [2]uint64{})
			want := refReduce(tt.dt, Prod, x, y)
			require.Equal(t, wantComplex(tt.dt, 2+4*tt.u, 0), complexBits(want, tt.dt), "reference")
			xy := append(alignedBytes(len(x))[:0], x...)
			yx := append(alignedBytes(len(y))[:0], y...)
			require.NoError(t, ReduceInto(xy, y, tt.dt, Prod))
			require.NoError(t, ReduceInto(yx, x, tt.dt, Prod))
			require.Equal(t, complexBits(want, tt.dt), complexBits(xy, tt.dt), "x*y")
			require.Equal(t, complexBits(want, tt.dt), complexBits(yx, tt.dt), "y*x")
		})
	}
}
