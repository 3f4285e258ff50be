// Vector reduction kernels for x86-64 with AVX2 and F16C, called from
// vec_amd64.go. Each kernel gives exactly the bits of the pure-Go
// reduction in reduce.go (same rounding, canonical NaNs, signed zeros); the
// Go side checks the CPU before calling any of them.

#ifndef GONCCL_REDUCE_KERNELS_H
#define GONCCL_REDUCE_KERNELS_H

#include <stddef.h>

// Element kinds the kernels handle.
enum {
	GONCCL_K_I8,
	GONCCL_K_U8,
	GONCCL_K_I16,
	GONCCL_K_U16,
	GONCCL_K_I32,
	GONCCL_K_U32,
	GONCCL_K_I64,
	GONCCL_K_U64,
	GONCCL_K_F16,
	GONCCL_K_BF16,
	GONCCL_K_F32,
	GONCCL_K_F64,
};

// Reduction ops. Avg reduces like Sum; floats take only the first four.
enum {
	GONCCL_OP_SUM,
	GONCCL_OP_PROD,
	GONCCL_OP_MAX,
	GONCCL_OP_MIN,
	GONCCL_OP_BAND,
	GONCCL_OP_BOR,
	GONCCL_OP_BXOR,
};

// The kernels are internal to libgonccl.so: hidden, so that they never join
// the exported gonccl* C API.
#define GONCCL_KERNEL __attribute__((visibility("hidden")))

// gonccl_reduce sets dst[i] = op(dst[i], src[i]) for n elements of kind.
// dst and src need no alignment and may be the same buffer.
GONCCL_KERNEL void gonccl_reduce(void *dst, const void *src, size_t n, int kind, int op);

// gonccl_divide divides n elements of kind in buf by the divisor: f for F32,
// F16 and BF16, d for F64 and for integers of up to 32 bits (truncating
// toward zero; d must be a positive integer no larger than 2^53). 64-bit
// integers have no kernel.
GONCCL_KERNEL void gonccl_divide(void *buf, size_t n, int kind, float f, double d);

#endif
