/*
 * realcuda.c: the fake CUDA driver's test hooks (tests/fakecuda/fakecuda.h) on a real
 * GPU, so that tests/capi/cuda_capi_test.c runs unchanged against the real libcuda.so.1.
 * It uses the CUDA driver API only, declared here by hand (no CUDA headers, no nvcc):
 * gcc and the driver are all it needs. tests/capi/link-realcuda.sh builds it, and the
 * test, with the link line scripts/gpu-check.sh uses on a GPU machine and CI uses
 * against the fake driver built as a libcuda.so.1 stand-in (tests/test_realcuda_link.py):
 *
 *     gcc -shared -o librealcuda.so realcuda.o -Wl,--no-undefined -L$DIR -l:libcuda.so.1
 *     GONCCL_CUDA_LIBRARY=$PWD/librealcuda.so ./cuda_capi_test RANK NRANKS ID_FILE
 *
 * gonccl dlopens this library as its "driver": the entry points defined below are
 * counted and passed on to the next definition (libcuda.so.1, through RTLD_NEXT); every
 * other cu* name gonccl looks up resolves in libcuda.so.1, this library's dependency
 * (dlsym on a handle searches its dependencies). This file's own driver calls of an
 * entry point it also defines go through next_*(), never through its own counting copy.
 *
 * "Device" memory is managed memory (cuMemAllocManaged), so the test reads results from
 * the host after fakecudaStreamDrain. The fake kernels are stream-ordered without a
 * kernel of our own: a fill is cuMemsetD32Async (a float's bits are 32 bits); an add, a
 * check (the consumer that counts stale reads) and a delay are host functions on the
 * stream (cuLaunchHostFunc), which run once everything queued before them has run and
 * hold back everything queued after them, as a kernel would. A stream's delay
 * (fakecudaStreamSetDelay) puts such a delay before every copy gonccl queues there (the
 * copies go through the counting entry points below), so its copies really run late.
 * Caveat: the driver may run the host functions of all streams on one thread, so a
 * delay on one stream can also hold back a host function of another; that adds order,
 * it never removes any, so it can hide a missing wait but never invent a stale read.
 * fakecudaSetDelay and fakecudaSetCopyRate are no-ops: a real GPU has its own timing.
 *
 * Counters: copies, pinned blocks and events gonccl allocates, primary context
 * references gonccl holds (this file's own are not counted), fake kernels, stale reads,
 * and operations gonccl queues on a stream under capture (cuStreamIsCapturing before
 * each) are counted here. bad_access, host_races and context_errors are what the fake
 * detects by owning the memory and the queues; a real driver cannot tell us, so they
 * stay 0 and the test's checks of them prove nothing on a GPU (the fake covers them in
 * CI; on a GPU, gpu-check runs the test under compute-sanitizer's memcheck instead).
 *
 * The test's devices wrap around the GPUs there are (its device 1 is GPU 0 again on a
 * one-GPU machine); realcudaDeviceCount() tells the test, which declares it weak, that
 * it runs here and how many GPUs there are, so it leaves out what a real driver cannot
 * be asked (a stream handle that is not one is undefined behaviour there) or what the
 * machine lacks (memory of another GPU than its own).
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
typedef void* CUgraph;
typedef unsigned long long CUdeviceptr;
typedef void (*CUhostFn)(void*);

/* The real driver's entry points this file calls and does not define itself (resolved
 * at link time in libcuda.so.1: the link fails with --no-undefined if one is missing). */
extern CUresult cuInit(unsigned int);
extern CUresult cuDeviceGetCount(int*);
extern CUresult cuDeviceGet(CUdevice*, int);
extern CUresult cuCtxSetCurrent(CUcontext);
extern CUresult cuMemAllocManaged(CUdeviceptr*, size_t, unsigned int);
extern CUresult cuMemFree_v2(CUdeviceptr);
extern CUresult cuStreamCreate(CUstream*, unsigned int);
extern CUresult cuStreamSynchronize(CUstream);
extern CUresult cuStreamIsCapturing(CUstream, int*);
extern CUresult cuStreamBeginCapture_v2(CUstream, int);
extern CUresult cuStreamEndCapture(CUstream, CUgraph*);
extern CUresult cuGraphDestroy(CUgraph);
extern CUresult cuMemsetD32Async(CUdeviceptr, unsigned int, size_t, CUstream);
extern CUresult cuLaunchHostFunc(CUstream, CUhostFn, void*);

#define CU_MEM_ATTACH_GLOBAL 0x1
#define CU_STREAM_CAPTURE_MODE_GLOBAL 0 /* torch.cuda.graph's default: other threads' unsafe calls invalidate it */
#define CUDA_ERROR_STREAM_CAPTURE_INVALIDATED 901
#define CU_STREAM_CAPTURE_STATUS_ACTIVE 1

int realcudaDeviceCount(void);

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

#define CK(call)                 \
  do {                           \
    CUresult r_ = (call);        \
    if (r_ != 0) die(#call, r_); \
  } while (0)

/* next(name): the definition of a driver entry point after this library's own. */
static void* next(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == NULL) {
    fprintf(stderr, "realcuda: the driver has no %s: %s\n", name, dlerror());
    exit(3);
  }
  return f;
}
#define NEXT(type, name) ((type)next(name))

/* ---- streams with a delay (fakecudaStreamSetDelay) ---- */

#define MAX_DELAYED 64
static struct {
  CUstream s;
  unsigned us;
} delayed[MAX_DELAYED];

static unsigned stream_delay(CUstream s) {
  unsigned us = 0;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_DELAYED; i++)
    if (delayed[i].s == s && s != NULL) us = delayed[i].us;
  pthread_mutex_unlock(&mu);
  return us;
}

/* ---- host functions on a stream: the slow fake kernels ---- */

enum { HOST_DELAY, HOST_ADD, HOST_CHECK };

struct hostop {
  int kind;
  unsigned delay_us;
  float* p;
  size_t count;
  float value;
};

static void run_hostop(void* arg) {
  struct hostop* h = arg;
  if (h->delay_us) usleep(h->delay_us);
  if (h->kind == HOST_ADD) {
    for (size_t i = 0; i < h->count; i++) h->p[i] += h->value;
  } else if (h->kind == HOST_CHECK) {
    for (size_t i = 0; i < h->count; i++) {
      if (h->p[i] != h->value) {
        bump(&counters.stale_reads, 1);
        break;
      }
    }
  }
  free(h);
}

static int enqueue_hostop(CUstream s, int kind, float* p, size_t count, float value, unsigned delay_us) {
  struct hostop* h = calloc(1, sizeof *h);
  if (h == NULL) return -1;
  *h = (struct hostop){kind, delay_us, p, count, value};
  if (cuLaunchHostFunc(s, run_hostop, h) != 0) {
    free(h);
    return -1;
  }
  return 0;
}

/* before_op runs before each operation gonccl queues on s: counts it if s is being
 * captured into a graph, and delays it if the test asked for a late stream. */
static CUresult before_op(CUstream s) {
  int status = 0;
  if (cuStreamIsCapturing(s, &status) == 0 && status == CU_STREAM_CAPTURE_STATUS_ACTIVE)
    bump(&counters.captured_ops, 1);
  unsigned us = stream_delay(s);
  if (us && enqueue_hostop(s, HOST_DELAY, NULL, 0, 0, us) != 0) return 1; /* CUDA_ERROR_INVALID_VALUE */
  return 0;
}

/* ---- the counted entry points gonccl calls; the rest go straight to libcuda ---- */

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
  CUresult r = before_op(s);
  if (r == 0) r = NEXT(CUresult (*)(void*, CUdeviceptr, size_t, CUstream), "cuMemcpyDtoHAsync_v2")(dst, src, n, s);
  if (r == 0) bump(&counters.dtoh, 1);
  return r;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  CUresult r = before_op(s);
  if (r == 0)
    r = NEXT(CUresult (*)(CUdeviceptr, const void*, size_t, CUstream), "cuMemcpyHtoDAsync_v2")(dst, src, n, s);
  if (r == 0) bump(&counters.htod, 1);
  return r;
}

CUresult cuEventRecord(CUevent e, CUstream s) {
  int status = 0;
  if (cuStreamIsCapturing(s, &status) == 0 && status == CU_STREAM_CAPTURE_STATUS_ACTIVE)
    bump(&counters.captured_ops, 1);
  return NEXT(CUresult (*)(CUevent, CUstream), "cuEventRecord")(e, s);
}

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  int status = 0;
  if (cuStreamIsCapturing(s, &status) == 0 && status == CU_STREAM_CAPTURE_STATUS_ACTIVE)
    bump(&counters.captured_ops, 1);
  return NEXT(CUresult (*)(CUstream, CUevent, unsigned int), "cuStreamWaitEvent")(s, e, flags);
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

CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  CUresult r = NEXT(CUresult (*)(CUcontext*, CUdevice), "cuDevicePrimaryCtxRetain")(c, d);
  if (r == 0) bump(&counters.primary_retained, 1);
  return r;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  CUresult r = NEXT(CUresult (*)(CUdevice), "cuDevicePrimaryCtxRelease_v2")(d);
  if (r == 0) bump(&counters.primary_retained, -1);
  return r;
}

/* ---- the test hooks ---- */

static int ndev;
static CUcontext ctx[64];

static void init_locked(void) {
  if (ndev > 0) return;
  CK(cuInit(0));
  CK(cuDeviceGetCount(&ndev));
  if (ndev <= 0) die("cuDeviceGetCount (no device)", -1);
  if (ndev > 64) ndev = 64;
}

int realcudaDeviceCount(void) {
  pthread_mutex_lock(&mu);
  init_locked();
  int n = ndev;
  pthread_mutex_unlock(&mu);
  return n;
}

/* device_ctx makes the primary context of the test's device dev (modulo the GPUs there
 * are) current on the calling thread, retaining it once (not counted: it is ours). */
static CUcontext device_ctx(int dev) {
  pthread_mutex_lock(&mu);
  init_locked();
  int d = dev % ndev;
  if (ctx[d] == NULL) {
    CUdevice h;
    CK(cuDeviceGet(&h, d));
    CK(NEXT(CUresult (*)(CUcontext*, CUdevice), "cuDevicePrimaryCtxRetain")(&ctx[d], h));
  }
  CUcontext c = ctx[d];
  pthread_mutex_unlock(&mu);
  CK(cuCtxSetCurrent(c));
  return c;
}

void* fakecudaMalloc(int dev, size_t bytes) {
  if (dev < 0) return NULL;
  device_ctx(dev);
  CUdeviceptr p = 0;
  if (cuMemAllocManaged(&p, bytes ? bytes : 1, CU_MEM_ATTACH_GLOBAL) != 0) return NULL;
  return (void*)(uintptr_t)p;
}

int fakecudaFree(void* p) { return cuMemFree_v2((CUdeviceptr)(uintptr_t)p) == 0 ? 0 : -1; }

void* fakecudaStreamCreateWithFlags(int dev, unsigned flags) {
  if (dev < 0) return NULL;
  device_ctx(dev);
  CUstream s = NULL;
  if (cuStreamCreate(&s, flags) != 0) return NULL;
  return s;
}

void* fakecudaStreamCreate(int dev) { return fakecudaStreamCreateWithFlags(dev, 0); }

int fakecudaStreamSetDelay(void* stream, unsigned us) {
  if (stream == NULL) return -1;
  int free_slot = -1, rc = -1;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_DELAYED && rc != 0; i++) {
    if (delayed[i].s == stream) {
      delayed[i].us = us;
      rc = 0;
    } else if (delayed[i].s == NULL && free_slot < 0) {
      free_slot = i;
    }
  }
  if (rc != 0 && free_slot >= 0) {
    delayed[free_slot].s = stream;
    delayed[free_slot].us = us;
    rc = 0;
  }
  pthread_mutex_unlock(&mu);
  return rc;
}

int fakecudaBeginCapture(void* stream) { return fakecudaBeginCaptureMode(stream, CU_STREAM_CAPTURE_MODE_GLOBAL); }

int fakecudaBeginCaptureMode(void* stream, int mode) { return cuStreamBeginCapture_v2(stream, mode) == 0 ? 0 : -1; }

static long captures_invalidated;

int fakecudaEndCapture(void* stream) {
  CUgraph g = NULL;
  CUresult r = cuStreamEndCapture(stream, &g);
  if (r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) __atomic_add_fetch(&captures_invalidated, 1, __ATOMIC_RELAXED);
  if (r != 0) return r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED ? -2 : -1;
  if (g != NULL && cuGraphDestroy(g) != 0) return -1;
  return 0;
}

long fakecudaCapturesInvalidated(void) { return __atomic_load_n(&captures_invalidated, __ATOMIC_RELAXED); }

void* fakecudaContext(int dev) { return dev < 0 ? NULL : device_ctx(dev); }

void fakecudaSetDelay(unsigned min_us, unsigned max_us) {
  (void)min_us;
  (void)max_us;
}

/* A real GPU's copies take the time its copy engines take. */
void fakecudaSetCopyRate(unsigned mib_per_s) { (void)mib_per_s; }

/* The fake kernels wait delay_us, plus the stream's own delay, before they run. */
int fakecudaFillF32(void* stream, void* p, size_t count, float value, unsigned delay_us) {
  unsigned d = delay_us + stream_delay(stream);
  if (d && enqueue_hostop(stream, HOST_DELAY, NULL, 0, 0, d) != 0) return -1;
  unsigned int bits;
  memcpy(&bits, &value, sizeof bits);
  if (cuMemsetD32Async((CUdeviceptr)(uintptr_t)p, bits, count, stream) != 0) return -1;
  bump(&counters.kernels, 1);
  return 0;
}

int fakecudaAddF32(void* stream, void* p, size_t count, float value, unsigned delay_us) {
  if (enqueue_hostop(stream, HOST_ADD, p, count, value, delay_us + stream_delay(stream)) != 0) return -1;
  bump(&counters.kernels, 1);
  return 0;
}

int fakecudaCheckF32(void* stream, void* p, size_t count, float want, unsigned delay_us) {
  if (enqueue_hostop(stream, HOST_CHECK, p, count, want, delay_us + stream_delay(stream)) != 0) return -1;
  bump(&counters.kernels, 1);
  return 0;
}

/* The runtime's reference on the primary context: on a real GPU the context device_ctx
 * retains (uncounted) is that reference; releasing it is what cudaDeviceReset would do. */
int fakecudaRuntimeInit(int dev) {
  if (dev < 0) return -1;
  device_ctx(dev);
  return 0;
}

int fakecudaRuntimeRelease(int dev) {
  if (dev < 0) return -1;
  pthread_mutex_lock(&mu);
  init_locked();
  int d = dev % ndev;
  CUcontext c = ctx[d];
  ctx[d] = NULL;
  pthread_mutex_unlock(&mu);
  if (c == NULL) return -1;
  CUdevice h;
  CK(cuDeviceGet(&h, d));
  return NEXT(CUresult (*)(CUdevice), "cuDevicePrimaryCtxRelease_v2")(h) == 0 ? 0 : -1;
}

/* torch's stream pool: 32 non-blocking streams per device, handed out round-robin. */
enum { POOL_STREAMS = 32 };
static void* pool[64][POOL_STREAMS];
static unsigned pool_next[64];

void* fakecudaPoolStream(int dev) {
  if (dev < 0) return NULL;
  device_ctx(dev);
  pthread_mutex_lock(&mu);
  int d = dev % ndev;
  unsigned i = pool_next[d]++ % POOL_STREAMS;
  if (pool[d][i] == NULL) {
    CUstream st = NULL;
    if (cuStreamCreate(&st, 0x1) == 0) pool[d][i] = st; /* CU_STREAM_NON_BLOCKING */
  }
  void* s = pool[d][i];
  pthread_mutex_unlock(&mu);
  return s;
}

/* A deliberately wrong kernel is the fake's test of its own comparisons; a real GPU runs
 * gonccl's kernels as built, so no kernel can be corrupted here. */
int fakecudaCorruptKernel(const char* name) {
  (void)name;
  return -1;
}

int fakecudaStreamDrain(void* stream) { return cuStreamSynchronize(stream) == 0 ? 0 : -1; }

void fakecudaGetCounters(fakecudaCounters* out) {
  pthread_mutex_lock(&mu);
  *out = counters;
  pthread_mutex_unlock(&mu);
}

/* The driver's hardware queues per context: CUDA_DEVICE_MAX_CONNECTIONS, default 8. */
int fakecudaHardwareQueues(void) {
  const char* v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  return v != NULL && *v != 0 ? atoi(v) : 8;
}
