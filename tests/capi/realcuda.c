/*
 * realcuda.c: the fake CUDA driver's test hooks (tests/fakecuda/fakecuda.h) on a real
 * GPU, so that tests/capi/cuda_capi_test.c runs unchanged against the real libcuda.so.1
 * (scripts/gpu-check.sh builds and runs it; it needs no CUDA toolkit, only gcc and the
 * driver):
 *
 *     gcc -shared -fPIC -O1 -o librealcuda.so realcuda.c -L$DIR -l:libcuda.so.1
 *     GONCCL_CUDA_LIBRARY=$PWD/librealcuda.so ./cuda_capi_test RANK NRANKS ID_FILE
 *
 * gonccl dlopens this library as its "driver": the few entry points below are counted
 * and passed on to the real driver; every other cu* name gonccl looks up resolves in
 * libcuda.so.1, this library's dependency (dlsym on a handle searches its dependencies).
 *
 * "Device" memory is managed memory (cuMemAllocManaged), so the test reads results from
 * the host after fakecudaStreamDrain. The slow fake kernels are a host function on the
 * stream that sleeps (it holds the stream back like a slow kernel), then a memset
 * (fill) or a host function that adds to the managed memory (add): stream-ordered
 * like kernels. fakecudaSetDelay is a no-op: a real GPU has its own timing.
 *
 * Counters: copies queued, pinned blocks allocated and freed, and events are counted
 * here. bad_access, host_races and context_errors are what the fake detects by
 * owning the memory and the queues; a real driver cannot tell us, so they stay 0 and
 * the test's checks of them prove nothing on a GPU (the fake covers them in CI).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUstream;
typedef void* CUevent;
typedef unsigned long long CUdeviceptr;
typedef void (*CUhostFn)(void*);

/* The real driver's functions this file calls (resolved at link time). */
extern CUresult cuInit(unsigned int);
extern CUresult cuDeviceGetCount(int*);
extern CUresult cuDeviceGet(CUdevice*, int);
extern CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
extern CUresult cuCtxSetCurrent(CUcontext);
extern CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int);
extern CUresult cuMemFree_v2(CUdeviceptr);
extern CUresult cuStreamCreate(CUstream*, unsigned int);
extern CUresult cuStreamSynchronize(CUstream);
extern CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream);
extern CUresult cuLaunchHostFunc(CUstream, CUhostFn, void*);

#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_STREAM_NON_BLOCKING 0x1

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fakecudaCounters counters;

static void bump(long* field, long delta) {
  pthread_mutex_lock(&mu);
  *field += delta;
  pthread_mutex_unlock(&mu);
}

static void die(const char* what, CUresult r) {
  fprintf(stderr, "realcuda: %s failed: CUDA error %d\n", what, r);
  exit(3);
}

#define CK(call)                      \
  do {                                \
    CUresult r_ = (call);             \
    if (r_ != 0) die(#call, r_);      \
  } while (0)

/* ---- the counted entry points gonccl calls; the rest go straight to libcuda ---- */

#define NEXT(type, name) ((type)dlsym(RTLD_NEXT, name))

CUresult cuMemHostAlloc(void** p, size_t n, unsigned int flags) {
  CUresult r = NEXT(CUresult (*)(void**, size_t, unsigned int), "cuMemHostAlloc")(p, n, flags);
  if (r == 0) {
    bump(&counters.host_allocs, 1);
    bump(&counters.host_live, 1);
  }
  return r;
}

CUresult cuMemFreeHost(void* p) {
  CUresult r = NEXT(CUresult (*)(void*), "cuMemFreeHost")(p);
  if (r == 0) {
    bump(&counters.host_frees, 1);
    bump(&counters.host_live, -1);
  }
  return r;
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  CUresult r = NEXT(CUresult (*)(void*, CUdeviceptr, size_t, CUstream), "cuMemcpyDtoHAsync_v2")(dst, src, n, s);
  if (r == 0) bump(&counters.dtoh, 1);
  return r;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  CUresult r =
      NEXT(CUresult (*)(CUdeviceptr, const void*, size_t, CUstream), "cuMemcpyHtoDAsync_v2")(dst, src, n, s);
  if (r == 0) bump(&counters.htod, 1);
  return r;
}

CUresult cuEventCreate(CUevent* e, unsigned int flags) {
  CUresult r = NEXT(CUresult (*)(CUevent*, unsigned int), "cuEventCreate")(e, flags);
  if (r == 0) bump(&counters.events_created, 1);
  return r;
}

CUresult cuEventDestroy_v2(CUevent e) {
  CUresult r = NEXT(CUresult (*)(CUevent), "cuEventDestroy_v2")(e);
  if (r == 0) bump(&counters.events_destroyed, 1);
  return r;
}

/* ---- the test hooks ---- */

static int ndev;
static CUcontext ctx[64];

static CUcontext device_ctx(int dev) {
  pthread_mutex_lock(&mu);
  if (ndev == 0) {
    CK(cuInit(0));
    CK(cuDeviceGetCount(&ndev));
    if (ndev <= 0) die("cuDeviceGetCount (no device)", -1);
    if (ndev > 64) ndev = 64;
  }
  int d = dev % ndev; /* the test's device 1 is device 0 again on a one-GPU machine */
  if (ctx[d] == NULL) {
    CUdevice h;
    CK(cuDeviceGet(&h, d));
    CK(cuDevicePrimaryCtxRetain(&ctx[d], h));
  }
  CUcontext c = ctx[d];
  pthread_mutex_unlock(&mu);
  CK(cuCtxSetCurrent(c));
  return c;
}

void* fakecudaMalloc(int dev, size_t bytes) {
  device_ctx(dev);
  CUdeviceptr p = 0;
  if (cuMemAllocManaged(&p, bytes ? bytes : 1, CU_MEM_ATTACH_GLOBAL) != 0) return NULL;
  return (void*)(uintptr_t)p;
}

int fakecudaFree(void* p) { return cuMemFree_v2((CUdeviceptr)(uintptr_t)p) == 0 ? 0 : -1; }

void* fakecudaStreamCreate(int dev) {
  device_ctx(dev);
  CUstream s = NULL;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  return s;
}

void* fakecudaContext(int dev) { return device_ctx(dev); }

void fakecudaSetDelay(unsigned min_us, unsigned max_us) {
  (void)min_us;
  (void)max_us;
}

struct slow {
  unsigned delay_us;
  float* p;     /* add: the floats to add value to; NULL for a plain delay */
  size_t count;
  float value;
};

static void run_slow(void* arg) {
  struct slow* s = arg;
  if (s->delay_us) usleep(s->delay_us);
  for (size_t i = 0; s->p && i < s->count; i++) s->p[i] += s->value;
  free(s);
}

static int enqueue_slow(void* stream, float* p, size_t count, float value, unsigned delay_us) {
  struct slow* s = calloc(1, sizeof *s);
  if (s == NULL) return -1;
  *s = (struct slow){delay_us, p, count, value};
  if (cuLaunchHostFunc(stream, run_slow, s) != 0) {
    free(s);
    return -1;
  }
  return 0;
}

int fakecudaFillF32(void* stream, void* p, size_t count, float value, unsigned delay_us) {
  if (delay_us && enqueue_slow(stream, NULL, 0, 0, delay_us) != 0) return -1;
  unsigned int bits;
  memcpy(&bits, &value, sizeof bits);
  bump(&counters.kernels, 1);
  return cuMemsetD32Async((CUdeviceptr)(uintptr_t)p, bits, count, stream) == 0 ? 0 : -1;
}

int fakecudaAddF32(void* stream, void* p, size_t count, float value, unsigned delay_us) {
  bump(&counters.kernels, 1);
  return enqueue_slow(stream, p, count, value, delay_us);
}

int fakecudaStreamDrain(void* stream) { return cuStreamSynchronize(stream) == 0 ? 0 : -1; }

void fakecudaGetCounters(fakecudaCounters* out) {
  pthread_mutex_lock(&mu);
  *out = counters;
  pthread_mutex_unlock(&mu);
}
