/*
 * context.c: the fake CUDA driver's initialization, error names, contexts and primary
 * contexts, the counters, and the state every part shares (see fakecuda_internal.h).
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"
#include "strict.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
fakeCtx g_ctx[NDEV];
__thread fakeCtx* t_current;
fakecudaCounters g_count;
int g_initialized;
fakeStream* g_streams;

void fault(const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fakecuda: FAULT: %s (the real driver would crash or corrupt memory here)\n", msg);
  fflush(stderr);
  abort();
}

int ctx_alive(const fakeCtx* ctx, unsigned gen) { return ctx->refs > 0 && ctx->gen == gen; }

/* Context checks. mu need not be held. */
CUresult need_ctx(void) {
  if (t_current == NULL) {
    __atomic_add_fetch(&g_count.context_errors, 1, __ATOMIC_SEQ_CST);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (__atomic_load_n(&t_current->refs, __ATOMIC_SEQ_CST) == 0)
    fault("a call with the primary context of device %d current, which was reset (its last reference released)",
          t_current->dev);
  return CUDA_SUCCESS;
}

/* retain takes a reference on dev's primary context. mu held. */
static void retain(int dev) { g_ctx[dev].refs++; }

/* release drops one; the last resets the context: everything made in it dies. mu held. */
static void release(int dev) {
  fakeCtx* c = &g_ctx[dev];
  if (--c->refs > 0) return;
  c->gen++;
  c->runtime = 0;
  g_count.primary_resets++;
  kill_allocs(c);
  ipc_forget(c);
  forget_streams(c);
}

void runtime_init(int dev) {
  g_ctx[dev].dev = dev;
  if (g_ctx[dev].runtime) return;
  g_ctx[dev].runtime = 1;
  retain(dev);
}

CUresult stream_ctx_ok(fakeStream* s) {
  CUresult r = need_ctx();
  if (r) return r;
  if (s->ctx != t_current) {
    __atomic_add_fetch(&g_count.context_errors, 1, __ATOMIC_SEQ_CST);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

/* ---- driver entry points ---- */

CUresult cuInit(unsigned int flags) {
  CALLED();
  (void)flags;
  const char* fail = getenv("FAKECUDA_INIT_ERROR");
  if (fail && *fail) return CUDA_ERROR_NO_DEVICE;
  const char* d = getenv("FAKECUDA_DELAY_US"); /* "min,max" */
  if (d && *d) {
    unsigned lo = 0, hi = 0;
    char* end;
    lo = (unsigned)strtoul(d, &end, 10);
    hi = (*end == ',') ? (unsigned)strtoul(end + 1, NULL, 10) : lo;
    fakecudaSetDelay(lo, hi);
  }
  for (int i = 0; i < NDEV; i++) g_ctx[i].dev = i;
  g_initialized = 1;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult r, const char** out) {
  CALLED();
  switch (r) {
    case CUDA_SUCCESS: *out = "CUDA_SUCCESS"; return 0;
    case CUDA_ERROR_INVALID_VALUE: *out = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case CUDA_ERROR_OUT_OF_MEMORY: *out = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case CUDA_ERROR_NOT_INITIALIZED: *out = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
    case CUDA_ERROR_NO_DEVICE: *out = "CUDA_ERROR_NO_DEVICE"; return 0;
    case CUDA_ERROR_INVALID_CONTEXT: *out = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
    case CUDA_ERROR_INVALID_HANDLE: *out = "CUDA_ERROR_INVALID_HANDLE"; return 0;
    case CUDA_ERROR_NOT_READY: *out = "CUDA_ERROR_NOT_READY"; return 0;
    case CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: *out = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return 0;
    case CUDA_ERROR_STREAM_CAPTURE_INVALIDATED: *out = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"; return 0;
  }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxGetCurrent(void** ctx) {
  CALLED();
  *ctx = t_current;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(void* ctx) {
  CALLED();
  if (ctx != NULL && ((fakeCtx*)ctx < g_ctx || (fakeCtx*)ctx >= g_ctx + NDEV)) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(int* dev) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  *dev = t_current->dev;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= NDEV) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  retain(dev);
  g_count.primary_retained++;
  pthread_mutex_unlock(&mu);
  *ctx = &g_ctx[dev];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  CALLED();
  if (dev < 0 || dev >= NDEV) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult r = CUDA_SUCCESS;
  if (g_count.primary_retained == 0 || g_ctx[dev].refs - g_ctx[dev].runtime <= 0) {
    r = CUDA_ERROR_INVALID_CONTEXT; /* released more often than retained */
  } else {
    g_count.primary_retained--;
    release(dev);
  }
  pthread_mutex_unlock(&mu);
  return r;
}

/* cuDevicePrimaryCtxGetState: flags 0 (the fake takes none), active while the context
 * has references. */
CUresult cuDevicePrimaryCtxGetState(int dev, unsigned* flags, int* active) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= NDEV) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  if (flags == NULL || active == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  *flags = 0;
  *active = g_ctx[dev].refs > 0;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* cuCtxGetId: unique per context made, so a primary context reset and retained again
 * (the same handle) has another id. */
CUresult cuCtxGetId(void* ctx, unsigned long long* id) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  fakeCtx* c = ctx;
  if (id == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (c < &g_ctx[0] || c >= &g_ctx[NDEV]) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&mu);
  CUresult r = CUDA_ERROR_INVALID_CONTEXT; /* inactive: nothing retains it */
  if (c->refs > 0) {
    *id = ((unsigned long long)(c->dev + 1) << 32) | c->gen;
    r = CUDA_SUCCESS;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

/* ---- test hooks ---- */

void* fakecudaContext(int dev) {
  if (dev < 0 || dev >= NDEV) return NULL;
  pthread_mutex_lock(&mu);
  runtime_init(dev);
  pthread_mutex_unlock(&mu);
  return &g_ctx[dev];
}

int fakecudaRuntimeInit(int dev) {
  if (dev < 0 || dev >= NDEV) return -1;
  pthread_mutex_lock(&mu);
  runtime_init(dev);
  pthread_mutex_unlock(&mu);
  return 0;
}

int fakecudaRuntimeRelease(int dev) {
  if (dev < 0 || dev >= NDEV) return -1;
  pthread_mutex_lock(&mu);
  int r = -1;
  if (g_ctx[dev].runtime) {
    g_ctx[dev].runtime = 0;
    release(dev);
    r = 0;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

void fakecudaGetCounters(fakecudaCounters* out) {
  pthread_mutex_lock(&mu);
  *out = g_count;
  pthread_mutex_unlock(&mu);
}
