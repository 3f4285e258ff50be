// reduce.cu: gonccl's reduction kernels, one extern "C" kernel per entry of the tables in
// reduce.cuh (two operands) and multi.cuh (one pass over many), each a grid-stride loop
// over its elements. Built by `make kernels` (scripts/build-kernels.sh) into
// gonccl_kernels.fatbin, which cuda/kernels.go embeds.
#include "reduce.cuh"
#include "multi.cuh"

// The launch's threads, numbered across the grid.
#define GK_TID ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x)
#define GK_NTHREADS ((uint64_t)gridDim.x * blockDim.x)

#define GK_REDUCE(OP, NAME, T)                                                                 \
  extern "C" __global__ void gonccl_reduce_##OP##_##NAME(void* dst, const void* src,           \
                                                          unsigned long long count) {          \
    gk::reduce_loop<T, gk::op_##OP>((T*)dst, (const T*)src, count, GK_TID, GK_NTHREADS);       \
  }
GK_REDUCE_KERNELS(GK_REDUCE)

#define GK_DIVIDE(OP, NAME, T)                                                                  \
  extern "C" __global__ void gonccl_divide_##NAME(void* buf, unsigned long long count, long long n) { \
    gk::divide_loop<T>((T*)buf, count, n, GK_TID, GK_NTHREADS);                                 \
  }
GK_DIVIDE_KERNELS(GK_DIVIDE)

// The one-pass kernels take their buffers in one struct, by value.
#define GK_MULTI(OP, NAME, T)                                                                  \
  extern "C" __global__ void gonccl_multi_##OP##_##NAME(gk::MultiArgs a) {                     \
    gk::multi_loop<T, gk::op_##OP, false>(a, GK_TID, GK_NTHREADS);                             \
  }
GK_REDUCE_KERNELS(GK_MULTI)

#define GK_MULTI_AVG(OP, NAME, T)                                                              \
  extern "C" __global__ void gonccl_multi_avg_##NAME(gk::MultiArgs a) {                        \
    gk::multi_loop<T, gk::op_sum, true>(a, GK_TID, GK_NTHREADS);                               \
  }
GK_DIVIDE_KERNELS(GK_MULTI_AVG)
