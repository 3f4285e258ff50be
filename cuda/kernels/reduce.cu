// reduce.cu: gonccl's reduction kernels, one extern "C" kernel per entry of the tables in
// reduce.cuh (two operands) and multi.cuh (one pass over many), each a grid-stride loop
// over its elements. Built by `make kernels` (scripts/build-kernels.sh) into
// gonccl_kernels.fatbin, which cuda/kernels.go embeds.
#include "reduce.cuh"
#include "multi.cuh"

// The launch's threads, numbered across the grid.
#define GK_TID ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x)
#define GK_NTHREADS ((uint64_t)gridDim.x * blockDim.x)

// gk_stop says whether the launch's abort word (reduce.cuh's aborted) is set: thread 0 of
// each block reads it, once, for the whole block. A null word costs no read; the word is
// the same for the whole grid, so every thread of a block takes the same branch.
__device__ __forceinline__ bool gk_stop(const unsigned* word) {
  if (word == nullptr) return false;
  __shared__ int stop;
  if (threadIdx.x == 0) stop = gk::aborted(word);
  __syncthreads();
  return stop != 0;
}

// The two-operand kernels read src, which may be a peer's memory, and take an abort word.
#define GK_REDUCE(OP, NAME, T)                                                                 \
  extern "C" __global__ void gonccl_reduce_##OP##_##NAME(void* dst, const void* src,           \
                                                          unsigned long long count,            \
                                                          const unsigned* abort) {             \
    if (gk_stop(abort)) return;                                                                \
    gk::reduce_loop<T, gk::op_##OP>((T*)dst, (const T*)src, count, GK_TID, GK_NTHREADS);       \
  }
GK_REDUCE_KERNELS(GK_REDUCE)

// The division kernels touch only the caller's own buffer: no abort word.
#define GK_DIVIDE(OP, NAME, T)                                                                  \
  extern "C" __global__ void gonccl_divide_##NAME(void* buf, unsigned long long count, long long n) { \
    gk::divide_loop<T>((T*)buf, count, n, GK_TID, GK_NTHREADS);                                 \
  }
GK_DIVIDE_KERNELS(GK_DIVIDE)

// The one-pass kernels take their buffers, and their abort word, in one struct, by value.
#define GK_MULTI(OP, NAME, T)                                                                  \
  extern "C" __global__ void gonccl_multi_##OP##_##NAME(gk::MultiArgs a) {                     \
    if (gk_stop(a.abort)) return;                                                              \
    gk::multi_loop<T, gk::op_##OP, false>(a, GK_TID, GK_NTHREADS);                             \
  }
GK_REDUCE_KERNELS(GK_MULTI)

#define GK_MULTI_AVG(OP, NAME, T)                                                              \
  extern "C" __global__ void gonccl_multi_avg_##NAME(gk::MultiArgs a) {                        \
    if (gk_stop(a.abort)) return;                                                              \
    gk::multi_loop<T, gk::op_sum, true>(a, GK_TID, GK_NTHREADS);                               \
  }
GK_DIVIDE_KERNELS(GK_MULTI_AVG)
