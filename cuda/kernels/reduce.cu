// reduce.cu: gonccl's reduction kernels, one extern "C" kernel per entry of the table in
// reduce.cuh, each a grid-stride loop over its elements. Built by `make kernels`
// (scripts/build-kernels.sh) into gonccl_kernels.fatbin, which cuda/kernels.go embeds.
#include "reduce.cuh"

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
