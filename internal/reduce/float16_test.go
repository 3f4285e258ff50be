package reduce

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFloat16ToFloat32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := Float16ToFloat32(h)
		want := refHalfFormat.decode(uint64(h))
		gb := math.Float32bits(got)
		if !math.IsNaN(want) {
			require.Equalf(t, math.Float32bits(float32(want)), gb, "half %#04x", h)
			continue
		}
		// NaN: stays NaN, becomes quiet, keeps sign and payload.
		require.Truef(t, got != got, "half %#04x -> %#08x is not NaN", h, gb)
		require.NotZerof(t, gb&0x00400000, "half %#04x -> %#08x is not quiet", h, gb)
		require.Equalf(t, uint32(h&0x8000)<<16, gb&0x80000000, "half %#04x sign", h)
		require.Equalf(t, uint32(h&0x1ff)<<13, gb&0x003fe000, "half %#04x payload", h)
	}
}

func TestFloat16RoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := Float32ToFloat16(Float16ToFloat32(h))
		if h&0x7fff > 0x7c00 {
			require.Equalf(t, h&0x8000|0x7e00, got, "NaN half %#04x", h)
			continue
		}
		require.Equalf(t, h, got, "half %#04x", h)
	}
}

func TestBfloat16ToFloat32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		b := uint16(i)
		got := Bfloat16ToFloat32(b)
		want := refBF16Format.decode(uint64(b))
		if math.IsNaN(want) {
			require.Truef(t, got != got, "bf16 %#04x", b)
			require.Equalf(t, uint32(b)<<16, math.Float32bits(got), "bf16 %#04x bits", b)
			continue
		}
		require.Equalf(t, math.Float32bits(float32(want)), math.Float32bits(got), "bf16 %#04x", b)
	}
}

func TestBfloat16RoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		b := uint16(i)
		got := Float32ToBfloat16(Bfloat16ToFloat32(b))
		if b&0x7fff > 0x7f80 {
			require.Equalf(t, uint16(0x7fc0), got, "NaN bf16 %#04x", b)
			continue
		}
		require.Equalf(t, b, got, "bf16 %#04x", b)
	}
}

func TestFloat32ToFloat16Known(t *testing.T) {
	tests := []struct {
		name string
		in   uint32 // float32 bits
		want uint16
	}{
		{"zero", 0x00000000, 0x0000},
		{"negative zero", 0x80000000, 0x8000},
		{"one", math.Float32bits(1), 0x3c00},
		{"minus two", math.Float32bits(-2), 0xc000},
		{"largest finite 65504", math.Float32bits(65504), 0x7bff},
		{"65519.99 rounds down", math.Float32bits(65519.99), 0x7bff},
		{"65520 ties to inf", math.Float32bits(65520), 0x7c00},
		{"-65520 ties to -inf", math.Float32bits(-65520), 0xfc00},
		{"max float32 overflows", 0x7f7fffff, 0x7c00},
		{"inf", 0x7f800000, 0x7c00},
		{"-inf", 0xff800000, 0xfc00},
		{"quiet NaN", 0x7fc00000, 0x7e00},
		{"signalling NaN", 0x7f800001, 0x7e00},
		{"negative NaN", 0xffc12345, 0xfe00},
		{"smallest subnormal 2^-24", math.Float32bits(0x1p-24), 0x0001},
		{"2^-25 ties to zero", math.Float32bits(0x1p-25), 0x0000},
		{"-2^-25 ties to -0", math.Float32bits(-0x1p-25), 0x8000},
		{"just above 2^-25", math.Float32bits(0x1p-25) + 1, 0x0001},
		{"3*2^-25 ties up to 2", math.Float32bits(3 * 0x1p-25), 0x0002},
		{"largest subnormal", math.Float32bits(1023 * 0x1p-24), 0x03ff},
		{"1023.5*2^-24 ties to normal", math.Float32bits(1023.5 * 0x1p-24), 0x0400},
		{"smallest normal 2^-14", math.Float32bits(0x1p-14), 0x0400},
		{"smallest float32 subnormal", 0x00000001, 0x0000},
		{"1+2^-11 ties to even (down)", math.Float32bits(1 + 0x1p-11), 0x3c00},
		{"1+3*2^-11 ties to even (up)", math.Float32bits(1 + 3*0x1p-11), 0x3c02},
		{"2047.9 rounds to 2048", math.Float32bits(2047.9), 0x6800},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equalf(t, tt.want, Float32ToFloat16(math.Float32frombits(tt.in)), "got %#04x", Float32ToFloat16(math.Float32frombits(tt.in)))
		})
	}
}

func TestFloat32ToBfloat16Known(t *testing.T) {
	tests := []struct {
		name string
		in   uint32 // float32 bits
		want uint16
	}{
		{"zero", 0x00000000, 0x0000},
		{"negative zero", 0x80000000, 0x8000},
		{"one", 0x3f800000, 0x3f80},
		{"1.00390625 ties to even (down)", 0x3f808000, 0x3f80},
		{"tie rounds to even (up)", 0x3f818000, 0x3f82},
		{"just above tie", 0x3f808001, 0x3f81},
		{"just below tie", 0x3f807fff, 0x3f80},
		{"negative tie", 0xbf818000, 0xbf82},
		{"max float32 overflows", 0x7f7fffff, 0x7f80},
		{"below overflow midpoint", 0x7f7f7fff, 0x7f7f},
		{"inf", 0x7f800000, 0x7f80},
		{"-inf", 0xff800000, 0xff80},
		{"quiet NaN", 0x7fc00000, 0x7fc0},
		{"signalling NaN with low payload", 0x7f800001, 0x7fc0},
		{"negative NaN", 0xffc12345, 0x7fc0},
		{"float32 subnormal rounds to zero", 0x00000001, 0x0000},
		{"subnormal tie to even zero", 0x00008000, 0x0000},
		{"subnormal tie to even up", 0x00018000, 0x0002},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Float32ToBfloat16(math.Float32frombits(tt.in))
			require.Equalf(t, tt.want, got, "got %#04x", got)
		})
	}
}

// checkFloat32To16 compares conv against the table reference for the float32
// with bit pattern bits.
func checkFloat32To16(t *testing.T, name string, conv func(float32) uint16, tab *refTable, nan func(uint32) uint16, bits uint32) {
	t.Helper()
	f := math.Float32frombits(bits)
	got := conv(f)
	var want uint16
	if f != f {
		want = nan(bits)
	} else {
		want = uint16(tab.roundFloat64(float64(f)))
	}
	if got != want {
		require.Failf(t, "wrong rounding", "%s(%#08x = %g) = %#04x, want %#04x", name, bits, f, got, want)
	}
}

func halfNaNFor(bits uint32) uint16 { return uint16(bits>>16)&0x8000 | 0x7e00 }

func bf16NaNFor(uint32) uint16 { return 0x7fc0 }

func TestFloat32ToFloat16Random(t *testing.T) {
	half, _ := refTables()
	rng := rand.New(rand.NewPCG(1, 16))
	for range 1 << 20 {
		checkFloat32To16(t, "Float32ToFloat16", Float32ToFloat16, half, halfNaNFor, rng.Uint32())
	}
	// Concentrate on the range that does not simply overflow or flush.
	for range 1 << 20 {
		bits := rng.Uint32()&0x807fffff | uint32(100+rng.IntN(45))<<23
		checkFloat32To16(t, "Float32ToFloat16", Float32ToFloat16, half, halfNaNFor, bits)
	}
}

func TestBfloat16FromFloat32Random(t *testing.T) {
	_, bf16 := refTables()
	rng := rand.New(rand.NewPCG(2, 16))
	for range 1 << 21 {
		checkFloat32To16(t, "Float32ToBfloat16", Float32ToBfloat16, bf16, bf16NaNFor, rng.Uint32())
	}
}

// tieNeighbours returns the float32 bit patterns at, just below and just
// above every midpoint between adjacent values of tab, for both signs.
func tieNeighbours(tab *refTable) []uint32 {
	var out []uint32
	for _, m := range tab.mids {
		b := math.Float32bits(float32(m))
		if float64(float32(m)) != m {
			panic("midpoint not exact in float32")
		}
		for _, x := range []uint32{b - 1, b, b + 1} {
			out = append(out, x, x|0x80000000)
		}
	}
	return out
}

func TestFloat32ToFloat16Ties(t *testing.T) {
	half, _ := refTables()
	for _, bits := range tieNeighbours(half) {
		checkFloat32To16(t, "Float32ToFloat16", Float32ToFloat16, half, halfNaNFor, bits)
	}
}

func TestBfloat16FromFloat32Ties(t *testing.T) {
	_, bf16 := refTables()
	for _, bits := range tieNeighbours(bf16) {
		checkFloat32To16(t, "Float32ToBfloat16", Float32ToBfloat16, bf16, bf16NaNFor, bits)
	}
}

// refRoundBinary rounds the float32 f to a binary format with mantBits
// fraction bits and minimum normal exponent emin, ties to even, using
// float64 arithmetic: the result is k*2^q with q the format's quantum at |f|.
// It returns the magnitude bits, clamped to infBits on overflow. f must be
// finite.
func refRoundBinary(f float32, mantBits, emin int, infBits uint64) uint64 {
	ax := math.Abs(float64(f))
	if ax == 0 {
		return 0
	}
	_, e := math.Frexp(ax) // ax = m * 2^e with m in [0.5, 1)
	q := max(e-1, emin) - mantBits
	k := math.RoundToEven(math.Ldexp(ax, -q))
	// Exponent field (q-emin+mantBits) and the k-1<<mantBits mantissa
	// combine as below; k == 2<<mantBits carries into the exponent.
	bits := uint64(int64(q-emin+mantBits)<<mantBits + int64(k))
	return min(bits, infBits)
}

// TestFloat16Bfloat16ExhaustiveFloat32 checks every float32 bit pattern
// (several CPU-minutes); set GONCCL_EXHAUSTIVE=1 to run it.
func TestFloat16Bfloat16ExhaustiveFloat32(t *testing.T) {
	if os.Getenv("GONCCL_EXHAUSTIVE") == "" {
		t.Skip("set GONCCL_EXHAUSTIVE=1 to check all 2^32 float32 values")
	}
	const chunks = 256
	var (
		next     atomic.Int64
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	check := func(c int) error {
		for lo := uint64(c) << 24; lo < uint64(c+1)<<24; lo++ {
			bits := uint32(lo)
			f := math.Float32frombits(bits)
			sign := uint16(bits>>16) & 0x8000
			wantH, wantB := sign|0x7e00, uint16(0x7fc0)
			if f == f {
				wantH = sign | uint16(refRoundBinary(f, 10, -14, 0x7c00))
				wantB = sign | uint16(refRoundBinary(f, 7, -126, 0x7f80))
			}
			if got := Float32ToFloat16(f); got != wantH {
				return fmt.Errorf("Float32ToFloat16(%#08x) = %#04x, want %#04x", bits, got, wantH)
			}
			if got := Float32ToBfloat16(f); got != wantB {
				return fmt.Errorf("Float32ToBfloat16(%#08x) = %#04x, want %#04x", bits, got, wantB)
			}
		}
		return nil
	}
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for c := int(next.Add(1) - 1); c < chunks; c = int(next.Add(1) - 1) {
				if err := check(c); err != nil {
					mu.Lock()
					firstErr = cmp.Or(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, firstErr)
}
