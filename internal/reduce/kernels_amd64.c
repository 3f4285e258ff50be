//go:build cgo && amd64

// AVX2 + F16C reduction kernels; see kernels.h. Every kernel works on
// whole 32-byte (or, for 16-bit floats, 16-byte) blocks; the last partial
// block is copied into a zeroed local block, reduced there and copied back,
// so no element is ever handled by different code than its neighbours.
//
// Bit-exactness with reduce.go rests on three things: IEEE add, multiply
// and divide in the default rounding mode (no fused multiply-add: nothing
// here multiplies and then adds, and contraction is off regardless), every
// NaN result replaced by the canonical quiet NaN, and Max/Min fixed up to
// order -0 below +0 and to return NaN for a NaN operand, which the x86
// max/min instructions do not do on their own.

#pragma GCC target("avx2,f16c")
#pragma GCC optimize("fp-contract=off")

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

// LOOP applies BLOCK(d, s, arg) to every whole block of L elements of type T
// in dst and src (n elements each), then to the tail padded with zeros.
#define LOOP(T, L, BLOCK, ARG)                                         \
	do {                                                           \
		T *d_ = dst;                                           \
		const T *s_ = src;                                     \
		size_t i_ = 0;                                         \
		for (; i_ + (L) <= n; i_ += (L))                       \
			BLOCK(d_ + i_, s_ + i_, ARG);                  \
		if (i_ < n) {                                          \
			T bd_[L], bs_[L];                              \
			size_t b_ = (n - i_) * sizeof(T);              \
			memset(bd_, 0, sizeof bd_);                    \
			memset(bs_, 0, sizeof bs_);                    \
			memcpy(bd_, d_ + i_, b_);                      \
			memcpy(bs_, s_ + i_, b_);                      \
			BLOCK(bd_, bs_, ARG);                          \
			memcpy(d_ + i_, bd_, b_);                      \
		}                                                      \
	} while (0)

// ---- integers: GCC vector extensions, 32 bytes at a time ----------------
//
// Sums, products and bitwise ops run on the unsigned vector type, which wraps
// like Go's integers; Max and Min compare in the element's own signedness.

#define INT_BLOCK(NAME, OP, BODY)                                      \
	static inline void NAME##_##OP(void *d, const void *s, int u_) \
	{                                                              \
		(void)u_;                                              \
		NAME##_uv a, b;                                        \
		memcpy(&a, d, 32);                                     \
		memcpy(&b, s, 32);                                     \
		BODY;                                                  \
		memcpy(d, &a, 32);                                     \
	}

#define INT_KERNEL(NAME, T, UT)                                                        \
	typedef T NAME##_v __attribute__((vector_size(32)));                           \
	typedef UT NAME##_uv __attribute__((vector_size(32)));                         \
	INT_BLOCK(NAME, sum, a += b)                                                   \
	INT_BLOCK(NAME, prod, a *= b)                                                  \
	INT_BLOCK(NAME, band, a &= b)                                                  \
	INT_BLOCK(NAME, bor, a |= b)                                                   \
	INT_BLOCK(NAME, bxor, a ^= b)                                                  \
	INT_BLOCK(NAME, max, NAME##_uv m = (NAME##_uv)((NAME##_v)a < (NAME##_v)b);    \
		  a = (a & ~m) | (b & m))                                              \
	INT_BLOCK(NAME, min, NAME##_uv m = (NAME##_uv)((NAME##_v)b < (NAME##_v)a);    \
		  a = (a & ~m) | (b & m))                                              \
	static void NAME(void *dst, const void *src, size_t n, int op)                 \
	{                                                                              \
		enum { L = 32 / sizeof(T) };                                           \
		switch (op) {                                                          \
		case GONCCL_OP_SUM: LOOP(UT, L, NAME##_sum, 0); break;                 \
		case GONCCL_OP_PROD: LOOP(UT, L, NAME##_prod, 0); break;               \
		case GONCCL_OP_MAX: LOOP(UT, L, NAME##_max, 0); break;                 \
		case GONCCL_OP_MIN: LOOP(UT, L, NAME##_min, 0); break;                 \
		case GONCCL_OP_BAND: LOOP(UT, L, NAME##_band, 0); break;               \
		case GONCCL_OP_BOR: LOOP(UT, L, NAME##_bor, 0); break;                 \
		case GONCCL_OP_BXOR: LOOP(UT, L, NAME##_bxor, 0); break;               \
		}                                                                      \
	}

INT_KERNEL(reduce_i8, int8_t, uint8_t)
INT_KERNEL(reduce_u8, uint8_t, uint8_t)
INT_KERNEL(reduce_i16, int16_t, uint16_t)
INT_KERNEL(reduce_u16, uint16_t, uint16_t)
INT_KERNEL(reduce_i32, int32_t, uint32_t)
INT_KERNEL(reduce_u32, uint32_t, uint32_t)
INT_KERNEL(reduce_i64, int64_t, uint64_t)
INT_KERNEL(reduce_u64, uint64_t, uint64_t)

// ---- float32 arithmetic, shared by float32, float16 and bfloat16 ---------

// canon_ps replaces every NaN lane of r by the canonical quiet NaN.
static inline __m256 canon_ps(__m256 r)
{
	__m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
	return _mm256_blendv_ps(r, nan, _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
}

static inline __m256 add_ps(__m256 a, __m256 b) { return canon_ps(_mm256_add_ps(a, b)); }
static inline __m256 mul_ps(__m256 a, __m256 b) { return canon_ps(_mm256_mul_ps(a, b)); }

// max_ps is Go's max: NaN if either lane is NaN, +0 over -0. Equal lanes
// differ at most in the sign of a zero, so their AND is the larger.
static inline __m256 max_ps(__m256 a, __m256 b)
{
	__m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
	__m256 r = _mm256_max_ps(a, b);
	r = _mm256_blendv_ps(r, _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
	return _mm256_blendv_ps(r, nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

// min_ps is Go's min: NaN if either lane is NaN, -0 under +0 (the OR of
// equal lanes).
static inline __m256 min_ps(__m256 a, __m256 b)
{
	__m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fc00000));
	__m256 r = _mm256_min_ps(a, b);
	r = _mm256_blendv_ps(r, _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
	return _mm256_blendv_ps(r, nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

// Loads and stores of eight float32 or half lanes. The values stored have
// already been canonicalized: F16C's round-to-nearest-even conversion turns
// the canonical float32 NaN into the canonical half 0x7e00.
static inline __m256 ld_f32(const void *p) { return _mm256_loadu_ps(p); }
static inline void st_f32(void *p, __m256 v) { _mm256_storeu_ps(p, v); }

static inline __m256 ld_f16(const void *p) { return _mm256_cvtph_ps(_mm_loadu_si128(p)); }
static inline void st_f16(void *p, __m256 v)
{
	_mm_storeu_si128(p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

#define F32_BLOCK(FMT, OP)                                                 \
	static inline void FMT##_##OP(void *d, const void *s, int u_)      \
	{                                                                  \
		(void)u_;                                                  \
		st_##FMT(d, OP##_ps(ld_##FMT(d), ld_##FMT(s)));            \
	}

// FMT_KERNEL defines reduce_FMT and divide_FMT for a format computed in
// float32, eight lanes of element type T at a time.
#define FMT_KERNEL(FMT, T)                                                     \
	F32_BLOCK(FMT, add)                                                    \
	F32_BLOCK(FMT, mul)                                                    \
	F32_BLOCK(FMT, max)                                                    \
	F32_BLOCK(FMT, min)                                                    \
	static void reduce_##FMT(void *dst, const void *src, size_t n, int op) \
	{                                                                      \
		switch (op) {                                                  \
		case GONCCL_OP_SUM: LOOP(T, 8, FMT##_add, 0); break;           \
		case GONCCL_OP_PROD: LOOP(T, 8, FMT##_mul, 0); break;          \
		case GONCCL_OP_MAX: LOOP(T, 8, FMT##_max, 0); break;           \
		case GONCCL_OP_MIN: LOOP(T, 8, FMT##_min, 0); break;           \
		}                                                              \
	}                                                                      \
	static inline void FMT##_div(void *d, const void *s, __m256 x)         \
	{                                                                      \
		(void)s;                                                       \
		st_##FMT(d, canon_ps(_mm256_div_ps(ld_##FMT(d), x)));          \
	}                                                                      \
	static void divide_##FMT(void *buf, size_t n, float f)                 \
	{                                                                      \
		void *dst = buf;                                               \
		const void *src = buf;                                         \
		LOOP(T, 8, FMT##_div, _mm256_set1_ps(f));                      \
	}

FMT_KERNEL(f32, float)
FMT_KERNEL(f16, uint16_t)

// ---- bfloat16: sixteen lanes at a time ------------------------------------
//
// A bfloat16 widens exactly to the float32 with its bits on top: unpacking
// 16-bit zeros below each element does it, within each 128-bit half, so
// bf16_lo holds elements 0-3 and 8-11 and bf16_hi 4-7 and 12-15. Packing the
// narrowed halves back (bf16_pack) restores the order.

static inline __m256 bf16_lo(__m256i v) { return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), v)); }
static inline __m256 bf16_hi(__m256i v) { return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), v)); }

// bf16_round rounds each float32 lane to nearest even bfloat16 by adding
// 0x7fff plus the lowest kept bit and dropping the low half, leaving the
// result in the low 16 bits. No NaN reaches here but the canonical one, which
// becomes 0x7fc0.
static inline __m256i bf16_round(__m256 v)
{
	__m256i b = _mm256_castps_si256(v);
	__m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
	b = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
	return _mm256_srli_epi32(b, 16);
}

static inline void bf16_pack(void *p, __m256 lo, __m256 hi)
{
	_mm256_storeu_si256(p, _mm256_packus_epi32(bf16_round(lo), bf16_round(hi)));
}

#define BF16_BLOCK(OP)                                                      \
	static inline void bf16_##OP(void *d, const void *s, int u_)        \
	{                                                                   \
		(void)u_;                                                   \
		__m256i a = _mm256_loadu_si256(d), b = _mm256_loadu_si256(s); \
		bf16_pack(d, OP##_ps(bf16_lo(a), bf16_lo(b)), OP##_ps(bf16_hi(a), bf16_hi(b))); \
	}

BF16_BLOCK(add)
BF16_BLOCK(mul)
BF16_BLOCK(max)
BF16_BLOCK(min)

static void reduce_bf16(void *dst, const void *src, size_t n, int op)
{
	switch (op) {
	case GONCCL_OP_SUM: LOOP(uint16_t, 16, bf16_add, 0); break;
	case GONCCL_OP_PROD: LOOP(uint16_t, 16, bf16_mul, 0); break;
	case GONCCL_OP_MAX: LOOP(uint16_t, 16, bf16_max, 0); break;
	case GONCCL_OP_MIN: LOOP(uint16_t, 16, bf16_min, 0); break;
	}
}

static inline void bf16_div(void *d, const void *s, __m256 x)
{
	(void)s;
	__m256i a = _mm256_loadu_si256(d);
	bf16_pack(d, canon_ps(_mm256_div_ps(bf16_lo(a), x)), canon_ps(_mm256_div_ps(bf16_hi(a), x)));
}

static void divide_bf16(void *buf, size_t n, float f)
{
	void *dst = buf;
	const void *src = buf;
	LOOP(uint16_t, 16, bf16_div, _mm256_set1_ps(f));
}

// ---- float64 ------------------------------------------------------------

static inline __m256d canon_pd(__m256d r)
{
	__m256d nan = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000));
	return _mm256_blendv_pd(r, nan, _mm256_cmp_pd(r, r, _CMP_UNORD_Q));
}

static inline __m256d add_pd(__m256d a, __m256d b) { return canon_pd(_mm256_add_pd(a, b)); }
static inline __m256d mul_pd(__m256d a, __m256d b) { return canon_pd(_mm256_mul_pd(a, b)); }

static inline __m256d max_pd(__m256d a, __m256d b)
{
	__m256d nan = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000));
	__m256d r = _mm256_max_pd(a, b);
	r = _mm256_blendv_pd(r, _mm256_and_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
	return _mm256_blendv_pd(r, nan, _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}

static inline __m256d min_pd(__m256d a, __m256d b)
{
	__m256d nan = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7ff8000000000000));
	__m256d r = _mm256_min_pd(a, b);
	r = _mm256_blendv_pd(r, _mm256_or_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
	return _mm256_blendv_pd(r, nan, _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
}

#define F64_BLOCK(OP)                                                         \
	static inline void f64_##OP(void *d, const void *s, int u_)           \
	{                                                                     \
		(void)u_;                                                     \
		_mm256_storeu_pd(d, OP##_pd(_mm256_loadu_pd(d), _mm256_loadu_pd(s))); \
	}

F64_BLOCK(add)
F64_BLOCK(mul)
F64_BLOCK(max)
F64_BLOCK(min)

static void reduce_f64(void *dst, const void *src, size_t n, int op)
{
	switch (op) {
	case GONCCL_OP_SUM: LOOP(double, 4, f64_add, 0); break;
	case GONCCL_OP_PROD: LOOP(double, 4, f64_mul, 0); break;
	case GONCCL_OP_MAX: LOOP(double, 4, f64_max, 0); break;
	case GONCCL_OP_MIN: LOOP(double, 4, f64_min, 0); break;
	}
}

static inline void f64_div(void *d, const void *s, __m256d x)
{
	(void)s;
	_mm256_storeu_pd(d, canon_pd(_mm256_div_pd(_mm256_loadu_pd(d), x)));
}

static void divide_f64(void *buf, size_t n, double x)
{
	void *dst = buf;
	const void *src = buf;
	LOOP(double, 4, f64_div, _mm256_set1_pd(x));
}

// ---- integer division ---------------------------------------------------
//
// Integers of up to 32 bits divide exactly in float64: for |a| < 2^32 and an
// integer divisor d <= 2^53 (so exact in float64), a/d rounded to float64 is
// off by less than 2^-21/d, less than the 1/d that separates a non-integer
// a/d from the nearest integer, so truncating it gives Go's quotient. Four
// elements at a time, each widened to int32 and then to float64.

static inline __m256d int_quot(__m128i x, __m256d d) { return _mm256_div_pd(_mm256_cvtepi32_pd(x), d); }
static inline __m128i int_trunc(__m256d q) { return _mm256_cvttpd_epi32(q); }

static inline __m128i ld4_8(const void *p)
{
	int32_t w;
	memcpy(&w, p, 4);
	return _mm_cvtsi32_si128(w);
}

static inline void st4_8(void *p, __m128i v)
{
	int32_t w = _mm_cvtsi128_si32(v);
	memcpy(p, &w, 4);
}

static inline void i8_div(void *d, const void *s, __m256d x)
{
	(void)s;
	__m128i q = int_trunc(int_quot(_mm_cvtepi8_epi32(ld4_8(d)), x));
	st4_8(d, _mm_packs_epi16(_mm_packs_epi32(q, q), q));
}

static inline void u8_div(void *d, const void *s, __m256d x)
{
	(void)s;
	__m128i q = int_trunc(int_quot(_mm_cvtepu8_epi32(ld4_8(d)), x));
	st4_8(d, _mm_packus_epi16(_mm_packus_epi32(q, q), q));
}

static inline void i16_div(void *d, const void *s, __m256d x)
{
	(void)s;
	__m128i q = int_trunc(int_quot(_mm_cvtepi16_epi32(_mm_loadl_epi64(d)), x));
	_mm_storel_epi64(d, _mm_packs_epi32(q, q));
}

static inline void u16_div(void *d, const void *s, __m256d x)
{
	(void)s;
	__m128i q = int_trunc(int_quot(_mm_cvtepu16_epi32(_mm_loadl_epi64(d)), x));
	_mm_storel_epi64(d, _mm_packus_epi32(q, q));
}

static inline void i32_div(void *d, const void *s, __m256d x)
{
	(void)s;
	_mm_storeu_si128(d, int_trunc(int_quot(_mm_loadu_si128(d), x)));
}

// u32_div shifts each element by -2^31 into int32 range and back; the
// quotient is truncated (non-negative, so toward zero) before the shift so
// that the shifted value is an exact integer.
static inline void u32_div(void *d, const void *s, __m256d x)
{
	(void)s;
	__m128i bias = _mm_set1_epi32((int32_t)0x80000000u);
	__m256d two31 = _mm256_set1_pd(2147483648.0);
	__m256d a = _mm256_add_pd(_mm256_cvtepi32_pd(_mm_xor_si128(_mm_loadu_si128(d), bias)), two31);
	__m256d q = _mm256_round_pd(_mm256_div_pd(a, x), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
	_mm_storeu_si128(d, _mm_xor_si128(int_trunc(_mm256_sub_pd(q, two31)), bias));
}

#define DIVIDE_INT(NAME, T)                                  \
	static void divide_##NAME(void *buf, size_t n, double d) \
	{                                                    \
		void *dst = buf;                             \
		const void *src = buf;                       \
		LOOP(T, 4, NAME##_div, _mm256_set1_pd(d));   \
	}

DIVIDE_INT(i8, int8_t)
DIVIDE_INT(u8, uint8_t)
DIVIDE_INT(i16, int16_t)
DIVIDE_INT(u16, uint16_t)
DIVIDE_INT(i32, int32_t)
DIVIDE_INT(u32, uint32_t)

// ---- entry points -------------------------------------------------------

void gonccl_reduce(void *dst, const void *src, size_t n, int kind, int op)
{
	switch (kind) {
	case GONCCL_K_I8: reduce_i8(dst, src, n, op); break;
	case GONCCL_K_U8: reduce_u8(dst, src, n, op); break;
	case GONCCL_K_I16: reduce_i16(dst, src, n, op); break;
	case GONCCL_K_U16: reduce_u16(dst, src, n, op); break;
	case GONCCL_K_I32: reduce_i32(dst, src, n, op); break;
	case GONCCL_K_U32: reduce_u32(dst, src, n, op); break;
	case GONCCL_K_I64: reduce_i64(dst, src, n, op); break;
	case GONCCL_K_U64: reduce_u64(dst, src, n, op); break;
	case GONCCL_K_F16: reduce_f16(dst, src, n, op); break;
	case GONCCL_K_BF16: reduce_bf16(dst, src, n, op); break;
	case GONCCL_K_F32: reduce_f32(dst, src, n, op); break;
	case GONCCL_K_F64: reduce_f64(dst, src, n, op); break;
	}
}

void gonccl_divide(void *buf, size_t n, int kind, float f, double d)
{
	switch (kind) {
	case GONCCL_K_F16: divide_f16(buf, n, f); break;
	case GONCCL_K_BF16: divide_bf16(buf, n, f); break;
	case GONCCL_K_F32: divide_f32(buf, n, f); break;
	case GONCCL_K_F64: divide_f64(buf, n, d); break;
	case GONCCL_K_I8: divide_i8(buf, n, d); break;
	case GONCCL_K_U8: divide_u8(buf, n, d); break;
	case GONCCL_K_I16: divide_i16(buf, n, d); break;
	case GONCCL_K_U16: divide_u16(buf, n, d); break;
	case GONCCL_K_I32: divide_i32(buf, n, d); break;
	case GONCCL_K_U32: divide_u32(buf, n, d); break;
	}
}
