/*
 * kernels_host.h: the host implementations of gonccl's reduction kernels
 * (kernels_host.cc, compiled from cuda/kernels/reduce.cuh and multi.cuh) that module.c runs for
 * cuLaunchKernel, by kernel name.
 */
#ifndef FAKECUDA_KERNELS_HOST_H_
#define FAKECUDA_KERNELS_HOST_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOST_MULTI_MAX 8 /* GK_MULTI_MAX of cuda/kernels/multi.cuh */

/* The one-pass kernels' parameter, gk::MultiArgs as C lays it out (kernels_host.cc
 * checks the two agree). */
typedef struct hostMultiArgs {
  const void* in[HOST_MULTI_MAX];
  void* out[HOST_MULTI_MAX];
  unsigned long long count;
  int nin, nout;
  long long div;
  const unsigned* abort; /* the abort word, or NULL (reduce.cuh's aborted) */
} hostMultiArgs;

/* One kernel: reduce(dst, src, count, abort), divide(buf, count, n) or multi(args), the
 * kernel's parameters, run as thread tid of a launch of nthreads threads (the device's
 * grid-stride loop). Exactly one of the three is set. reduce and multi touch nothing
 * once their abort word is set. */
typedef struct hostKernel {
  const char* name;
  size_t elem; /* bytes per element */
  void (*reduce)(void* dst, const void* src, unsigned long long count, const unsigned* abort,
                 unsigned long long tid, unsigned long long nthreads);
  void (*divide)(void* buf, unsigned long long count, long long n, unsigned long long tid,
                 unsigned long long nthreads);
  void (*multi)(const hostMultiArgs* args, unsigned long long tid, unsigned long long nthreads);
} hostKernel;

#pragma GCC visibility push(hidden)
extern const hostKernel fakecuda_host_kernels[];
extern const int fakecuda_host_kernel_count;
#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
