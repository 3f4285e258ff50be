package reduce

// Deliberately simple reference implementations used by the tests. They share
// no code with the implementation: half and bfloat16 values are decoded from
// their fields with math.Ldexp, rounding searches a table of every
// representable magnitude, and arithmetic on finite values is exact (big.Rat,
// big.Int) followed by one rounding step.

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"sort"
	"sync"
	"unsafe"
)

// Canonical NaN bit patterns expected from floating-point reductions.
var refCanonicalNaN = map[DataType]uint64{
	Float16:  0x7e00,
	Bfloat16: 0x7fc0,
	Float32:  0x7fc00000,
	Float64:  0x7ff8000000000000,
}

// refFormat describes a binary floating-point format by its field widths.
type refFormat struct {
	expBits, mantBits uint
}

var (
	refHalfFormat = refFormat{expBits: 5, mantBits: 10}
	refBF16Format = refFormat{expBits: 8, mantBits: 7}
)

// bias returns the exponent bias of f.
func (f refFormat) bias() int { return 1<<(f.expBits-1) - 1 }

// signBit returns the sign bit mask of f.
func (f refFormat) signBit() uint64 { return 1 << (f.expBits + f.mantBits) }

// infBits returns the bit pattern of +Inf in f.
func (f refFormat) infBits() uint64 { return (1<<f.expBits - 1) << f.mantBits }

// decode returns the value of bit pattern b in format f as a float64 (exact
// for every format narrower than float64).
func (f refFormat) decode(b uint64) float64 {
	mant := b & (1<<f.mantBits - 1)
	exp := int(b>>f.mantBits) & (1<<f.expBits - 1)
	var v float64
	switch {
	case exp == 1<<f.expBits-1 && mant == 0:
		v = math.Inf(1)
	case exp == 1<<f.expBits-1:
		v = math.NaN()
	case exp == 0:
		v = math.Ldexp(float64(mant), 1-f.bias()-int(f.mantBits))
	default:
		v = math.Ldexp(float64(mant|1<<f.mantBits), exp-f.bias()-int(f.mantBits))
	}
	if b&f.signBit() != 0 {
		v = -v
	}
	return v
}

// refTable lists every finite non-negative value of a 16-bit format in bit
// pattern order (which is value order), followed by the value the next
// pattern, +Inf, would have if the exponent range were unbounded. Rounding to
// nearest against that extra entry gives IEEE overflow behaviour.
type refTable struct {
	format refFormat
	vals   []float64  // vals[i] is the value of bit pattern i
	mids   []float64  // mids[i] is the midpoint of vals[i] and vals[i+1] (exact)
	rvals  []*big.Rat // vals as exact rationals
	rmids  []*big.Rat // mids as exact rationals
}

func newRefTable(f refFormat) *refTable {
	inf := int(f.infBits())
	t := &refTable{format: f}
	for i := 0; i < inf; i++ {
		t.vals = append(t.vals, f.decode(uint64(i)))
	}
	// The first pattern past the largest finite value continues the top
	// binade: 2^(emax+1).
	t.vals = append(t.vals, math.Ldexp(1, f.bias()+1))
	for i := 0; i+1 < len(t.vals); i++ {
		t.mids = append(t.mids, (t.vals[i]+t.vals[i+1])/2)
	}
	for _, v := range t.vals {
		t.rvals = append(t.rvals, new(big.Rat).SetFloat64(v))
	}
	for _, v := range t.mids {
		t.rmids = append(t.rmids, new(big.Rat).SetFloat64(v))
	}
	return t
}

var (
	refTablesOnce          sync.Once
	refHalfTab, refBF16Tab *refTable
)

// refTables returns the half and bfloat16 tables, building them once.
func refTables() (half, bf16 *refTable) {
	refTablesOnce.Do(func() {
		refHalfTab = newRefTable(refHalfFormat)
		refBF16Tab = newRefTable(refBF16Format)
	})
	return refHalfTab, refBF16Tab
}

// pick chooses between pattern i and i+1 given the sign of x-mids[i].
func (t *refTable) pick(i, cmp int) uint64 {
	switch {
	case cmp < 0:
		return uint64(i)
	case cmp > 0:
		return uint64(i + 1)
	case i%2 == 0:
		return uint64(i)
	default:
		return uint64(i + 1)
	}
}

// roundFloat64 returns the bit pattern nearest to x (ties to even pattern,
// overflow to Inf). x must not be NaN.
func (t *refTable) roundFloat64(x float64) uint64 {
	var sign uint64
	if math.Signbit(x) {
		sign = t.format.signBit()
		x = -x
	}
	last := len(t.vals) - 1
	if x >= t.vals[last] {
		return sign | uint64(last)
	}
	// Largest i with vals[i] <= x.
	i := sort.Search(len(t.vals), func(i int) bool { return t.vals[i] > x }) - 1
	c := 0
	if x < t.mids[i] {
		c = -1
	} else if x > t.mids[i] {
		c = 1
	}
	return sign | t.pick(i, c)
}

// roundRat returns the bit pattern nearest to the exact value x, with neg
// giving the sign (needed for zero results).
func (t *refTable) roundRat(x *big.Rat, neg bool) uint64 {
	var sign uint64
	if neg {
		sign = t.format.signBit()
	}
	m := new(big.Rat).Abs(x)
	last := len(t.rvals) - 1
	if m.Cmp(t.rvals[last]) >= 0 {
		return sign | uint64(last)
	}
	i := sort.Search(len(t.rvals), func(i int) bool { return t.rvals[i].Cmp(m) > 0 }) - 1
	return sign | t.pick(i, m.Cmp(t.rmids[i]))
}

// refDecodeFloat returns the value of the dt element with bit pattern b.
func refDecodeFloat(dt DataType, b uint64) float64 {
	switch dt {
	case Float16:
		return refHalfFormat.decode(b)
	case Bfloat16:
		return refBF16Format.decode(b)
	case Float32:
		return float64(math.Float32frombits(uint32(b)))
	default:
		return math.Float64frombits(b)
	}
}

// refEncodeRat rounds the exact finite value x to dt (ties to even) and
// returns its bit pattern; neg gives the sign of a zero result.
func refEncodeRat(dt DataType, x *big.Rat, neg bool) uint64 {
	half, bf16 := refTables()
	switch dt {
	case Float16:
		return half.roundRat(x, neg)
	case Bfloat16:
		return bf16.roundRat(x, neg)
	case Float32:
		f, _ := x.Float32()
		if f == 0 && neg {
			f = float32(math.Copysign(0, -1))
		}
		return uint64(math.Float32bits(f))
	default:
		f, _ := x.Float64()
		if f == 0 && neg {
			f = math.Copysign(0, -1)
		}
		return math.Float64bits(f)
	}
}

// refEncodeSpecial encodes v, which is ±Inf, NaN or exactly representable in
// dt, as dt bits (NaN becomes the canonical NaN).
func refEncodeSpecial(dt DataType, v float64) uint64 {
	if math.IsNaN(v) {
		return refCanonicalNaN[dt]
	}
	if math.IsInf(v, 0) {
		return refInfFor(dt, v < 0)
	}
	return refEncodeRat(dt, new(big.Rat).SetFloat64(v), math.Signbit(v))
}

// refInfFor returns the bits of ±Inf for dt.
func refInfFor(dt DataType, neg bool) uint64 {
	var b uint64
	switch dt {
	case Float16:
		b = 0x7c00
	case Bfloat16:
		b = 0x7f80
	case Float32:
		b = 0x7f800000
	default:
		b = 0x7ff0000000000000
	}
	if neg {
		b |= 1 << (8*dt.Size() - 1)
	}
	return b
}

// refLanes returns the scalar type a dt element is made of and how many of
// them: a complex element is two floats (real, imaginary), anything else is
// one dt.
func refLanes(dt DataType) (DataType, int) {
	switch dt {
	case Complex64:
		return Float32, 2
	case Complex128:
		return Float64, 2
	}
	return dt, 1
}

// refReduce returns op applied element by element to the dt elements of a
// and b.
func refReduce(dt DataType, op RedOp, a, b []byte) []byte {
	out := alignedBytes(len(a))
	lane, k := refLanes(dt)
	for i := 0; i < len(a)/dt.Size(); i++ {
		if k == 1 {
			refPutElem(out, dt, i, refReduceElem(dt, op, refGetElem(a, dt, i), refGetElem(b, dt, i)))
			continue
		}
		x := [2]uint64{refGetElem(a, lane, 2*i), refGetElem(a, lane, 2*i+1)}
		y := [2]uint64{refGetElem(b, lane, 2*i), refGetElem(b, lane, 2*i+1)}
		r := refReduceComplex(lane, op, x, y)
		refPutElem(out, lane, 2*i, r[0])
		refPutElem(out, lane, 2*i+1, r[1])
	}
	return out
}

// refDivide returns the dt elements of buf divided by n.
func refDivide(dt DataType, buf []byte, n int) []byte {
	out := alignedBytes(len(buf))
	lane, _ := refLanes(dt)
	for i := 0; i < len(buf)/lane.Size(); i++ {
		refPutElem(out, lane, i, refDivideElem(lane, refGetElem(buf, lane, i), n))
	}
	return out
}

// refReduceElem returns op(a, b) for single elements of type dt, given and
// returned as bit patterns. dt must not be complex (see refReduceComplex).
func refReduceElem(dt DataType, op RedOp, a, b uint64) uint64 {
	switch {
	case dt == Bool:
		return refReduceBool(op, a != 0, b != 0)
	case dt.IsFloat():
		return refReduceFloat(dt, op, a, b)
	}
	return refReduceInt(dt, op, a, b)
}

// refReduceBool applies op to two truth values as torch does for bool
// tensors: sum and max are or, prod and min are and.
func refReduceBool(op RedOp, x, y bool) uint64 {
	var r bool
	switch op {
	case Sum, Max, Bor:
		r = x || y
	case Prod, Min, Band:
		r = x && y
	case Bxor:
		r = x != y
	}
	if r {
		return 1
	}
	return 0
}

// refReduceComplex returns op(x, y) for complex values given as (real,
// imaginary) bit patterns of the float type part, each operation rounded
// separately: (a+bi)(c+di) = (ac - bd) + (ad + bc)i.
func refReduceComplex(part DataType, op RedOp, x, y [2]uint64) [2]uint64 {
	add := func(p, q uint64) uint64 { return refReduceFloat(part, Sum, p, q) }
	mul := func(p, q uint64) uint64 { return refReduceFloat(part, Prod, p, q) }
	neg := func(p uint64) uint64 { return p ^ refFloatFormat(part).signBit() }
	if op == Prod {
		return [2]uint64{
			add(mul(x[0], y[0]), neg(mul(x[1], y[1]))),
			add(mul(x[0], y[1]), mul(x[1], y[0])),
		}
	}
	return [2]uint64{add(x[0], y[0]), add(x[1], y[1])}
}

// refIsSigned reports whether dt is a signed integer type.
func refIsSigned(dt DataType) bool {
	return dt == Int8 || dt == Int16 || dt == Int32 || dt == Int64
}

// refBigInt returns the integer value of the dt element with bits b.
func refBigInt(dt DataType, b uint64) *big.Int {
	bits := uint(8 * dt.Size())
	x := new(big.Int).SetUint64(b)
	if refIsSigned(dt) && b>>(bits-1)&1 == 1 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), bits))
	}
	return x
}

// refWrap reduces x modulo 2^bits of dt and returns the two's complement bits.
func refWrap(dt DataType, x *big.Int) uint64 {
	mod := new(big.Int).Lsh(big.NewInt(1), uint(8*dt.Size()))
	return new(big.Int).Mod(x, mod).Uint64()
}

func refReduceInt(dt DataType, op RedOp, a, b uint64) uint64 {
	x, y := refBigInt(dt, a), refBigInt(dt, b)
	r := new(big.Int)
	switch op {
	case Sum, Avg:
		r.Add(x, y)
	case Prod:
		r.Mul(x, y)
	case Max:
		if x.Cmp(y) >= 0 {
			r.Set(x)
		} else {
			r.Set(y)
		}
	case Min:
		if x.Cmp(y) <= 0 {
			r.Set(x)
		} else {
			r.Set(y)
		}
	case Band:
		r.And(x, y)
	case Bor:
		r.Or(x, y)
	case Bxor:
		r.Xor(x, y)
	}
	return refWrap(dt, r)
}

func refReduceFloat(dt DataType, op RedOp, a, b uint64) uint64 {
	x, y := refDecodeFloat(dt, a), refDecodeFloat(dt, b)
	if math.IsNaN(x) || math.IsNaN(y) {
		return refCanonicalNaN[dt]
	}
	switch op {
	case Max, Min:
		// The result is one of the operands; zeros of opposite sign
		// compare equal, and Max prefers +0, Min prefers -0.
		switch {
		case x > y:
			if op == Max {
				return a
			}
			return b
		case x < y:
			if op == Max {
				return b
			}
			return a
		case math.Signbit(x) == math.Signbit(y):
			return a
		case (op == Max) == math.Signbit(x):
			return b
		default:
			return a
		}
	}
	if math.IsInf(x, 0) || math.IsInf(y, 0) {
		// IEEE rules for infinities: float64 gets them right.
		if op == Prod {
			return refEncodeSpecial(dt, x*y)
		}
		return refEncodeSpecial(dt, x+y)
	}
	rx, ry := new(big.Rat).SetFloat64(x), new(big.Rat).SetFloat64(y)
	r := new(big.Rat)
	var neg bool
	if op == Prod {
		r.Mul(rx, ry)
		neg = math.Signbit(x) != math.Signbit(y)
	} else {
		r.Add(rx, ry)
		// An exact zero sum is -0 only when both operands are -0.
		neg = r.Sign() < 0 || (r.Sign() == 0 && math.Signbit(x) && math.Signbit(y))
	}
	return refEncodeRat(dt, r, neg)
}

// refDivideElem returns the dt element with bits a divided by n.
func refDivideElem(dt DataType, a uint64, n int) uint64 {
	if !dt.IsFloat() {
		q := new(big.Int).Quo(refBigInt(dt, a), big.NewInt(int64(n)))
		return refWrap(dt, q)
	}
	x := refDecodeFloat(dt, a)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return refEncodeSpecial(dt, x)
	}
	r := new(big.Rat).SetFloat64(x)
	r.Quo(r, new(big.Rat).SetInt64(int64(n)))
	return refEncodeRat(dt, r, math.Signbit(x))
}

// refGetElem reads element i of dt from buf (native byte order).
func refGetElem(buf []byte, dt DataType, i int) uint64 {
	p := buf[i*dt.Size():]
	switch dt.Size() {
	case 1:
		return uint64(p[0])
	case 2:
		return uint64(binary.NativeEndian.Uint16(p))
	case 4:
		return uint64(binary.NativeEndian.Uint32(p))
	default:
		return binary.NativeEndian.Uint64(p)
	}
}

// refPutElem writes element i of dt into buf (native byte order).
func refPutElem(buf []byte, dt DataType, i int, v uint64) {
	p := buf[i*dt.Size():]
	switch dt.Size() {
	case 1:
		p[0] = byte(v)
	case 2:
		binary.NativeEndian.PutUint16(p, uint16(v))
	case 4:
		binary.NativeEndian.PutUint32(p, uint32(v))
	default:
		binary.NativeEndian.PutUint64(p, v)
	}
}

// alignedBytes returns n zero bytes aligned to 8 bytes.
func alignedBytes(n int) []byte {
	words := make([]uint64, (n+7)/8+1)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), n)
}

// refFloatFormat returns the field widths of float dtype dt.
func refFloatFormat(dt DataType) refFormat {
	switch dt {
	case Float16:
		return refHalfFormat
	case Bfloat16:
		return refBF16Format
	case Float8e4m3:
		return refFormat{expBits: 4, mantBits: 3}
	case Float8e5m2:
		return refFormat{expBits: 5, mantBits: 2}
	case Float32:
		return refFormat{expBits: 8, mantBits: 23}
	default:
		return refFormat{expBits: 11, mantBits: 52}
	}
}

// randElem returns random element bits for dt, mixing uniformly random bit
// patterns, special values and values of similar magnitude so that sums and
// products exercise rounding rather than only overflow. nanBias makes NaNs
// more frequent (for commutativity tests).
func randElem(rng *rand.Rand, dt DataType, nanBias bool) uint64 {
	bits := uint(8 * dt.Size())
	all := uint64(1)<<bits - 1
	if bits == 64 {
		all = math.MaxUint64
	}
	if dt == Bool {
		// Mostly 0 and 1, sometimes another byte that must read as true.
		if rng.IntN(8) == 0 {
			return rng.Uint64() & all
		}
		return uint64(rng.IntN(2))
	}
	if !dt.IsFloat() {
		switch rng.IntN(4) {
		case 0, 1:
			return rng.Uint64() & all
		case 2:
			return uint64(rng.IntN(11)-5) & all
		default:
			specials := []uint64{0, 1, all, all >> 1, (all >> 1) + 1}
			return specials[rng.IntN(len(specials))]
		}
	}
	f := refFloatFormat(dt)
	sign := uint64(0)
	if rng.IntN(2) == 1 {
		sign = f.signBit()
	}
	mantMask := uint64(1)<<f.mantBits - 1
	expMax := uint64(1)<<f.expBits - 1
	kind := rng.IntN(10)
	if nanBias && kind < 4 {
		kind = 9
	}
	switch kind {
	case 0, 1, 2:
		return rng.Uint64() & all
	case 3, 4, 5, 6:
		// Moderate exponent around the bias.
		e := uint64(f.bias() + rng.IntN(9) - 4)
		return sign | e<<f.mantBits | rng.Uint64()&mantMask
	case 7:
		// Subnormals and small integers in the subnormal range.
		return sign | rng.Uint64()&mantMask>>rng.IntN(int(f.mantBits))
	case 8:
		specials := []uint64{
			0,                                 // zero
			expMax << f.mantBits,              // Inf
			(expMax-1)<<f.mantBits | mantMask, // largest finite
			1,                                 // smallest subnormal
			1 << f.mantBits,                   // smallest normal
			uint64(f.bias()) << f.mantBits,    // 1.0
		}
		return sign | specials[rng.IntN(len(specials))]
	default:
		// NaN with a random payload, quiet or signalling.
		payload := rng.Uint64() & mantMask
		if payload == 0 {
			payload = 1
		}
		return sign | expMax<<f.mantBits | payload
	}
}
