// reduce.cuh: gonccl's reduction kernels, element ops and loops, written once for two
// compilers: nvcc builds them into device kernels (reduce.cu -> gonccl_kernels.fatbin,
// by scripts/build-kernels.sh), and the fake CUDA driver compiles the very same code as
// host C++ (tests/fakecuda/kernels_host.cc), so CI runs every kernel's loop without a GPU.
//
// The semantics are internal/reduce's ReduceInto and DivideBy, bit for bit: integers wrap;
// float NaN results are the canonical quiet NaN; max/min return NaN for a NaN operand and
// order -0 below +0; float16 and bfloat16 are widened to float, combined, and rounded
// once to nearest even by the same bit-level conversions as internal/reduce/float16.go
// (not the hardware's, which give another NaN); Bool reads non-zero as true and writes
// 0 or 1; complex products use the textbook formula without fused multiply-adds; integer
// division truncates toward zero. Every float operation goes through add_rn & co., which
// on the device are the intrinsics that are never contracted into an FMA.
#ifndef GONCCL_REDUCE_CUH_
#define GONCCL_REDUCE_CUH_

#include <stdint.h>

#ifdef __CUDACC__
#define GK_FN __host__ __device__ __forceinline__
#define GK_UNROLL _Pragma("unroll")
#else
#include <string.h>
#define GK_FN inline
#define GK_UNROLL _Pragma("GCC unroll 16")
#endif

namespace gk {

// ---- element types whose storage is shared with another type ------------------------

struct half_t { uint16_t v; };   // IEEE binary16, as bits
struct bf16_t { uint16_t v; };   // bfloat16, as bits
struct bool_t { uint8_t v; };    // 0 is false, anything else true
struct c64_t { float re, im; };  // complex64
struct c128_t { double re, im; }; // complex128

// ---- bit casts and IEEE arithmetic that is never fused -----------------------------

GK_FN float f32_from_bits(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float f;
  memcpy(&f, &b, 4);
  return f;
#endif
}

GK_FN uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
#endif
}

GK_FN double f64_from_bits(uint64_t b) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double((long long)b);
#else
  double f;
  memcpy(&f, &b, 8);
  return f;
#endif
}

GK_FN uint64_t f64_bits(double f) {
#ifdef __CUDA_ARCH__
  return (uint64_t)__double_as_longlong(f);
#else
  uint64_t b;
  memcpy(&b, &f, 8);
  return b;
#endif
}

#ifdef __CUDA_ARCH__
GK_FN float add_rn(float a, float b) { return __fadd_rn(a, b); }
GK_FN float sub_rn(float a, float b) { return __fsub_rn(a, b); }
GK_FN float mul_rn(float a, float b) { return __fmul_rn(a, b); }
GK_FN float div_rn(float a, float b) { return __fdiv_rn(a, b); }
GK_FN double add_rn(double a, double b) { return __dadd_rn(a, b); }
GK_FN double sub_rn(double a, double b) { return __dsub_rn(a, b); }
GK_FN double mul_rn(double a, double b) { return __dmul_rn(a, b); }
GK_FN double div_rn(double a, double b) { return __ddiv_rn(a, b); }
#else
template <class F> GK_FN F add_rn(F a, F b) { return a + b; }
template <class F> GK_FN F sub_rn(F a, F b) { return a - b; }
template <class F> GK_FN F mul_rn(F a, F b) { return a * b; }
template <class F> GK_FN F div_rn(F a, F b) { return a / b; }
#endif

// canon replaces any NaN by the canonical quiet NaN.
GK_FN float canon(float f) { return f != f ? f32_from_bits(0x7fc00000u) : f; }
GK_FN double canon(double f) { return f != f ? f64_from_bits(0x7ff8000000000000ull) : f; }

// fmax_go and fmin_go are Go's max and min: NaN if either operand is NaN (canonical
// here), +0 above -0. Equal operands differ at most in the sign of a zero, so the AND
// (max) or OR (min) of their bits is the answer.
GK_FN float fmax_go(float a, float b) {
  if (a != a || b != b) return f32_from_bits(0x7fc00000u);
  if (a == b) return f32_from_bits(f32_bits(a) & f32_bits(b));
  return a > b ? a : b;
}
GK_FN float fmin_go(float a, float b) {
  if (a != a || b != b) return f32_from_bits(0x7fc00000u);
  if (a == b) return f32_from_bits(f32_bits(a) | f32_bits(b));
  return a < b ? a : b;
}
GK_FN double fmax_go(double a, double b) {
  if (a != a || b != b) return f64_from_bits(0x7ff8000000000000ull);
  if (a == b) return f64_from_bits(f64_bits(a) & f64_bits(b));
  return a > b ? a : b;
}
GK_FN double fmin_go(double a, double b) {
  if (a != a || b != b) return f64_from_bits(0x7ff8000000000000ull);
  if (a == b) return f64_from_bits(f64_bits(a) | f64_bits(b));
  return a < b ? a : b;
}

// ---- float16 and bfloat16 conversions (internal/reduce/float16.go, line for line) ---

// f16_to_f32 widens exactly: the shifted fields read as a float 2^112 too small, which
// the multiplication fixes for normal and subnormal halves alike; infinities and NaNs
// keep their payload, a signalling NaN becomes quiet.
GK_FN float f16_to_f32(uint16_t h) {
  uint32_t a = (uint32_t)(h & 0x7fff) << 13;
  uint32_t b = f32_bits(mul_rn(f32_from_bits(a), 0x1p112f));
  if (a >= (0x7c00u << 13)) b = a | 0x7f800000u | ((((a & 0x7fffffu) + 0x7fffffu) >> 1) & 0x00400000u);
  return f32_from_bits(b | ((uint32_t)(h & 0x8000) << 16));
}

// f32_to_f16 rounds to nearest even; 65520 and above become infinity, NaN 0x7e00 with
// f's sign (the reductions pass only canonical, positive NaNs).
GK_FN uint16_t f32_to_f16(float f) {
  uint32_t b = f32_bits(f);
  uint32_t a = b & 0x7fffffffu;
  uint16_t sign = (uint16_t)((b >> 16) & 0x8000);
  if (a >= 0x38800000u) {  // 2^-14, the smallest normal half
    if (a >= 0x477ff000u) return sign | (a > 0x7f800000u ? 0x7e00 : 0x7c00);
    a -= (127 - 15) << 23;
    return sign | (uint16_t)((a + 0xfffu + ((a >> 13) & 1)) >> 13);
  }
  // Adding 0.5 rounds to a multiple of 2^-24, ties to even: the subnormal's bits.
  return sign | (uint16_t)(f32_bits(add_rn(f32_from_bits(a), 0.5f)) - 0x3f000000u);
}

GK_FN float bf16_to_f32(uint16_t b) { return f32_from_bits((uint32_t)b << 16); }

GK_FN uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1)) >> 16);
}

// ---- the element ops ----------------------------------------------------------------

enum { op_sum, op_prod, op_max, op_min, op_band, op_bor, op_bxor };

// float_op applies a real op in F (float or double), canonicalizing NaN results.
template <int OP, class F> GK_FN F float_op(F a, F b) {
  if constexpr (OP == op_sum) return canon(add_rn(a, b));
  if constexpr (OP == op_prod) return canon(mul_rn(a, b));
  if constexpr (OP == op_max) return fmax_go(a, b);
  if constexpr (OP == op_min) return fmin_go(a, b);
}

// Elem<T> holds the reduction and the division of element type T.
template <class T> struct Elem;

// IntElem: sums and products in unsigned arithmetic of at least 32 bits (C promotes
// smaller types to int, whose overflow is undefined), then truncated: two's
// complement wrap-around, as Go's integers.
template <class T, class U> struct IntElem {
  template <int OP> GK_FN static T reduce(T a, T b) {
    if constexpr (OP == op_sum) return (T)((U)a + (U)b);
    if constexpr (OP == op_prod) return (T)((U)a * (U)b);
    if constexpr (OP == op_max) return a < b ? b : a;
    if constexpr (OP == op_min) return b < a ? b : a;
    if constexpr (OP == op_band) return (T)(a & b);
    if constexpr (OP == op_bor) return (T)(a | b);
    if constexpr (OP == op_bxor) return (T)(a ^ b);
  }
  GK_FN static T divide(T v, long long n) {
    if constexpr ((T)-1 < (T)0) return (T)((long long)v / n);
    else return (T)((unsigned long long)v / (unsigned long long)n);
  }
};

#define GK_INT_ELEM(T, W) \
  template <> struct Elem<T> : IntElem<T, W> {};
GK_INT_ELEM(int8_t, uint32_t)
GK_INT_ELEM(uint8_t, uint32_t)
GK_INT_ELEM(int16_t, uint32_t)
GK_INT_ELEM(uint16_t, uint32_t)
GK_INT_ELEM(int32_t, uint32_t)
GK_INT_ELEM(uint32_t, uint32_t)
GK_INT_ELEM(int64_t, uint64_t)
GK_INT_ELEM(uint64_t, uint64_t)
#undef GK_INT_ELEM

template <> struct Elem<float> {
  template <int OP> GK_FN static float reduce(float a, float b) { return float_op<OP>(a, b); }
  GK_FN static float divide(float v, long long n) { return canon(div_rn(v, (float)n)); }
};

template <> struct Elem<double> {
  template <int OP> GK_FN static double reduce(double a, double b) { return float_op<OP>(a, b); }
  GK_FN static double divide(double v, long long n) { return canon(div_rn(v, (double)n)); }
};

// Half and bfloat16 compute in float and round once.
template <> struct Elem<half_t> {
  template <int OP> GK_FN static half_t reduce(half_t a, half_t b) {
    return half_t{f32_to_f16(float_op<OP>(f16_to_f32(a.v), f16_to_f32(b.v)))};
  }
  GK_FN static half_t divide(half_t v, long long n) {
    return half_t{f32_to_f16(canon(div_rn(f16_to_f32(v.v), (float)n)))};
  }
};

template <> struct Elem<bf16_t> {
  template <int OP> GK_FN static bf16_t reduce(bf16_t a, bf16_t b) {
    return bf16_t{f32_to_bf16(float_op<OP>(bf16_to_f32(a.v), bf16_to_f32(b.v)))};
  }
  GK_FN static bf16_t divide(bf16_t v, long long n) {
    return bf16_t{f32_to_bf16(div_rn(bf16_to_f32(v.v), (float)n))};
  }
};

// Bool: band, bor, bxor on truth values (the Go side maps sum and max to bor, prod
// and min to band).
template <> struct Elem<bool_t> {
  template <int OP> GK_FN static bool_t reduce(bool_t a, bool_t b) {
    uint8_t x = a.v != 0, y = b.v != 0;
    if constexpr (OP == op_band) return bool_t{(uint8_t)(x & y)};
    if constexpr (OP == op_bor) return bool_t{(uint8_t)(x | y)};
    if constexpr (OP == op_bxor) return bool_t{(uint8_t)(x ^ y)};
  }
};

// Complex: sums add the parts, products are (ac-bd) + (ad+bc)i with every product
// rounded before the sum, as internal/reduce/complex.go.
template <class C, class F> struct ComplexElem {
  template <int OP> GK_FN static C reduce(C x, C y) {
    if constexpr (OP == op_sum) return C{canon(add_rn(x.re, y.re)), canon(add_rn(x.im, y.im))};
    if constexpr (OP == op_prod) {
      F re = sub_rn(mul_rn(x.re, y.re), mul_rn(x.im, y.im));
      F im = add_rn(mul_rn(x.re, y.im), mul_rn(x.im, y.re));
      return C{canon(re), canon(im)};
    }
  }
  GK_FN static C divide(C v, long long n) {
    F d = (F)n;
    return C{canon(div_rn(v.re, d)), canon(div_rn(v.im, d))};
  }
};
template <> struct Elem<c64_t> : ComplexElem<c64_t, float> {};
template <> struct Elem<c128_t> : ComplexElem<c128_t, double> {};

// ---- the abort word ---------------------------------------------------------------------
//
// A kernel that reads or writes another rank's memory takes an abort word: a 32-bit word in
// host memory the GPU maps (the rank's own flag region, cuda/hostflags.go), which the host
// sets once the communicator has failed, before it lets any released wait through and
// before it unmaps a peer's memory. Such a kernel reads the word before it touches any
// buffer and returns at once, touching nothing, when it is set. A null word is never set
// (the kernels' callers that read only their own rank's memory pass none). No kernel waits
// on a flag: the ranks' waits are stream memory operations, so the word is read once per
// block and never in a loop.
GK_FN bool aborted(const unsigned* word) {
  return word != nullptr && *(const volatile unsigned*)word != 0;
}

// ---- the loops ------------------------------------------------------------------------
//
// One thread of a launch of nthreads threads handles elements tid, tid+nthreads, ... .
// Where dst and src sit at the same offset modulo 16 bytes, the elements up to the first
// 16-byte boundary go one at a time, then whole 16-byte packs (one vector load per
// operand), then the tail one at a time; otherwise every element goes alone. A thread
// touches only its own elements, so the fake driver runs a launch by calling the loop
// for each tid in turn and gets the very bytes the device would.

template <class T> struct alignas(16) Pack {
  static constexpr int n = 16 / sizeof(T) ? 16 / sizeof(T) : 1;
  T e[n];
};

template <class T> GK_FN Pack<T> load_pack(const T* p) {
#ifdef __CUDA_ARCH__
  return *reinterpret_cast<const Pack<T>*>(p);
#else
  Pack<T> v;
  memcpy(&v, p, sizeof v);
  return v;
#endif
}

template <class T> GK_FN void store_pack(T* p, const Pack<T>& v) {
#ifdef __CUDA_ARCH__
  *reinterpret_cast<Pack<T>*>(p) = v;
#else
  memcpy(p, &v, sizeof v);
#endif
}

// head_elems returns how many leading elements go alone before dst and src (a may be
// the same address) both reach a 16-byte boundary, or count if they never do together.
template <class T> GK_FN uint64_t head_elems(const void* dst, const void* src, uint64_t count) {
  uintptr_t da = (uintptr_t)dst & 15, sa = (uintptr_t)src & 15;
  uintptr_t gap = (16 - da) & 15;
  if (Pack<T>::n == 1 || da != sa || gap % sizeof(T) != 0) return count;
  uint64_t head = gap / sizeof(T);
  return head < count ? head : count;
}

template <class T, int OP>
GK_FN void reduce_loop(T* dst, const T* src, uint64_t count, uint64_t tid, uint64_t nthreads) {
  constexpr int V = Pack<T>::n;
  uint64_t head = head_elems<T>(dst, src, count);
  for (uint64_t i = tid; i < head; i += nthreads) dst[i] = Elem<T>::template reduce<OP>(dst[i], src[i]);
  uint64_t npacks = (count - head) / V;
  T* d = dst + head;
  const T* s = src + head;
  for (uint64_t i = tid; i < npacks; i += nthreads) {
    Pack<T> a = load_pack(d + i * V), b = load_pack(s + i * V);
    GK_UNROLL
    for (int j = 0; j < V; j++) a.e[j] = Elem<T>::template reduce<OP>(a.e[j], b.e[j]);
    store_pack(d + i * V, a);
  }
  for (uint64_t i = head + npacks * V + tid; i < count; i += nthreads)
    dst[i] = Elem<T>::template reduce<OP>(dst[i], src[i]);
}

template <class T>
GK_FN void divide_loop(T* buf, uint64_t count, long long n, uint64_t tid, uint64_t nthreads) {
  constexpr int V = Pack<T>::n;
  uint64_t head = head_elems<T>(buf, buf, count);
  for (uint64_t i = tid; i < head; i += nthreads) buf[i] = Elem<T>::divide(buf[i], n);
  uint64_t npacks = (count - head) / V;
  T* d = buf + head;
  for (uint64_t i = tid; i < npacks; i += nthreads) {
    Pack<T> a = load_pack(d + i * V);
    GK_UNROLL
    for (int j = 0; j < V; j++) a.e[j] = Elem<T>::divide(a.e[j], n);
    store_pack(d + i * V, a);
  }
  for (uint64_t i = head + npacks * V + tid; i < count; i += nthreads) buf[i] = Elem<T>::divide(buf[i], n);
}

}  // namespace gk

// ---- the kernel table -------------------------------------------------------------------
//
// Every kernel, as X(op, dtype, type): reduce kernels are gonccl_reduce_<op>_<dtype>,
// division kernels gonccl_divide_<dtype> (X(div, dtype, type)). The pairs follow
// internal/reduce's CheckReduction; avg reduces with the sum kernel, and Bool's sum/max
// and prod/min with bor and band. cuda/kernels.go names the same kernels.

#define GK_INTS(X, OP) \
  X(OP, i8, int8_t) X(OP, u8, uint8_t) X(OP, i16, int16_t) X(OP, u16, uint16_t) \
  X(OP, i32, int32_t) X(OP, u32, uint32_t) X(OP, i64, int64_t) X(OP, u64, uint64_t)
#define GK_FLOATS(X, OP) \
  X(OP, f16, gk::half_t) X(OP, bf16, gk::bf16_t) X(OP, f32, float) X(OP, f64, double)
#define GK_COMPLEX(X, OP) X(OP, c64, gk::c64_t) X(OP, c128, gk::c128_t)

#define GK_REDUCE_KERNELS(X)                                                              \
  GK_INTS(X, sum) GK_INTS(X, prod) GK_INTS(X, max) GK_INTS(X, min) GK_INTS(X, band)       \
  GK_INTS(X, bor) GK_INTS(X, bxor)                                                        \
  GK_FLOATS(X, sum) GK_FLOATS(X, prod) GK_FLOATS(X, max) GK_FLOATS(X, min)                \
  X(band, bool, gk::bool_t) X(bor, bool, gk::bool_t) X(bxor, bool, gk::bool_t)            \
  GK_COMPLEX(X, sum) GK_COMPLEX(X, prod)

#define GK_DIVIDE_KERNELS(X) GK_INTS(X, div) GK_FLOATS(X, div) GK_COMPLEX(X, div)

#endif
