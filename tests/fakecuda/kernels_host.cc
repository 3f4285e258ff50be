/*
 * kernels_host.cc: every kernel of cuda/kernels/reduce.cu compiled for the host from the
 * same source (reduce.cuh's element ops and loops, multi.cuh's one-pass loop), so that the fake driver runs exactly
 * the code the GPU runs, thread by thread. C++ (templates) but no C++ runtime: the fake
 * links as plain C.
 */
#pragma GCC optimize("fp-contract=off")

#include "kernels_host.h"

#include <stddef.h>

#pragma GCC visibility push(hidden)
#include "../../cuda/kernels/reduce.cuh"
#include "../../cuda/kernels/multi.cuh"
#pragma GCC visibility pop

static_assert(sizeof(hostMultiArgs) == sizeof(gk::MultiArgs) && HOST_MULTI_MAX == GK_MULTI_MAX &&
                  offsetof(hostMultiArgs, count) == offsetof(gk::MultiArgs, count) &&
                  offsetof(hostMultiArgs, div) == offsetof(gk::MultiArgs, div) &&
                  offsetof(hostMultiArgs, abort) == offsetof(gk::MultiArgs, abort),
              "hostMultiArgs is not gk::MultiArgs");

#define HOST_REDUCE(OP, NAME, T)                                                                 \
  static void host_reduce_##OP##_##NAME(void* dst, const void* src, unsigned long long count,   \
                                        const unsigned* abort, unsigned long long tid,          \
                                        unsigned long long nthreads) {                          \
    if (gk::aborted(abort)) return;                                                             \
    gk::reduce_loop<T, gk::op_##OP>((T*)dst, (const T*)src, count, tid, nthreads);              \
  }
GK_REDUCE_KERNELS(HOST_REDUCE)

#define HOST_DIVIDE(OP, NAME, T)                                                                 \
  static void host_divide_##NAME(void* buf, unsigned long long count, long long n,              \
                                 unsigned long long tid, unsigned long long nthreads) {         \
    gk::divide_loop<T>((T*)buf, count, n, tid, nthreads);                                       \
  }
GK_DIVIDE_KERNELS(HOST_DIVIDE)

#define HOST_MULTI(OP, NAME, T)                                                                       \
  static void host_multi_##OP##_##NAME(const hostMultiArgs* a, unsigned long long tid,                \
                                       unsigned long long nthreads) {                                 \
    if (gk::aborted(a->abort)) return;                                                                \
    gk::multi_loop<T, gk::op_##OP, false>(*(const gk::MultiArgs*)a, tid, nthreads);                   \
  }
GK_REDUCE_KERNELS(HOST_MULTI)

#define HOST_MULTI_AVG(OP, NAME, T)                                                                   \
  static void host_multi_avg_##NAME(const hostMultiArgs* a, unsigned long long tid,                   \
                                    unsigned long long nthreads) {                                    \
    if (gk::aborted(a->abort)) return;                                                                \
    gk::multi_loop<T, gk::op_sum, true>(*(const gk::MultiArgs*)a, tid, nthreads);                     \
  }
GK_DIVIDE_KERNELS(HOST_MULTI_AVG)

#define REDUCE_ENTRY(OP, NAME, T) {"gonccl_reduce_" #OP "_" #NAME, sizeof(T), host_reduce_##OP##_##NAME, nullptr, nullptr},
#define DIVIDE_ENTRY(OP, NAME, T) {"gonccl_divide_" #NAME, sizeof(T), nullptr, host_divide_##NAME, nullptr},
#define MULTI_ENTRY(OP, NAME, T) {"gonccl_multi_" #OP "_" #NAME, sizeof(T), nullptr, nullptr, host_multi_##OP##_##NAME},
#define MULTI_AVG_ENTRY(OP, NAME, T) {"gonccl_multi_avg_" #NAME, sizeof(T), nullptr, nullptr, host_multi_avg_##NAME},

extern "C" {
const hostKernel fakecuda_host_kernels[] = {GK_REDUCE_KERNELS(REDUCE_ENTRY) GK_DIVIDE_KERNELS(DIVIDE_ENTRY)
                                                GK_REDUCE_KERNELS(MULTI_ENTRY) GK_DIVIDE_KERNELS(MULTI_AVG_ENTRY)};
const int fakecuda_host_kernel_count = sizeof fakecuda_host_kernels / sizeof fakecuda_host_kernels[0];
}
