/*
 * kernels_host.cc: every kernel of cuda/kernels/reduce.cu compiled for the host from the
 * same source (reduce.cuh's element ops and loops), so that the fake driver runs exactly
 * the code the GPU runs, thread by thread. C++ (templates) but no C++ runtime: the fake
 * links as plain C.
 */
#pragma GCC optimize("fp-contract=off")

#include "kernels_host.h"

#pragma GCC visibility push(hidden)
#include "../../cuda/kernels/reduce.cuh"
#pragma GCC visibility pop

#define HOST_REDUCE(OP, NAME, T)                                                                 \
  static void host_reduce_##OP##_##NAME(void* dst, const void* src, unsigned long long count,   \
                                        unsigned long long tid, unsigned long long nthreads) {  \
    gk::reduce_loop<T, gk::op_##OP>((T*)dst, (const T*)src, count, tid, nthreads);              \
  }
GK_REDUCE_KERNELS(HOST_REDUCE)

#define HOST_DIVIDE(OP, NAME, T)                                                                 \
  static void host_divide_##NAME(void* buf, unsigned long long count, long long n,              \
                                 unsigned long long tid, unsigned long long nthreads) {         \
    gk::divide_loop<T>((T*)buf, count, n, tid, nthreads);                                       \
  }
GK_DIVIDE_KERNELS(HOST_DIVIDE)

#define REDUCE_ENTRY(OP, NAME, T) {"gonccl_reduce_" #OP "_" #NAME, sizeof(T), host_reduce_##OP##_##NAME, nullptr},
#define DIVIDE_ENTRY(OP, NAME, T) {"gonccl_divide_" #NAME, sizeof(T), nullptr, host_divide_##NAME},

extern "C" {
const hostKernel fakecuda_host_kernels[] = {GK_REDUCE_KERNELS(REDUCE_ENTRY) GK_DIVIDE_KERNELS(DIVIDE_ENTRY)};
const int fakecuda_host_kernel_count = sizeof fakecuda_host_kernels / sizeof fakecuda_host_kernels[0];
}
