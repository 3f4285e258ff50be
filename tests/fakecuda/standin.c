/*
 * standin.c: the driver entry points the fake needs to stand in for libcuda.so.1 under
 * tests/capi/realcuda.c (the fake's hooks implemented with the real driver API), so
 * that CI links realcuda.c with -Wl,--no-undefined exactly as scripts/gpu-check.sh
 * does on a GPU machine, and runs it (tests/test_realcuda_link.py). gonccl itself calls
 * none of these.
 *
 * Built for that as a shared object with soname libcuda.so.1 and -Wl,-Bsymbolic: a
 * real driver never calls the test's hooks, and realcuda.c defines hooks of the same
 * names, so the fake's own calls of its hooks (fakecudaMalloc below) must bind to the
 * fake's definitions.
 *
 * Each definition is weak: where another part of the fake defines the same entry point
 * (device memory or stream creation of its own), that one is the fake's and this one
 * steps aside. Managed memory is the fake's device memory (which the host reads anyway);
 * a host function is a record op followed by a wait op on the stream, with a thread that
 * runs the function between the two, so it runs after everything queued before it and
 * holds back everything queued after it.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define WEAK __attribute__((weak))
#define CUDA_ERROR_ILLEGAL_STATE 401

WEAK CUresult cuDeviceGetCount(int* n) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  *n = NDEV;
  return CUDA_SUCCESS;
}

WEAK CUresult cuDeviceGet(int* dev, int ordinal) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= NDEV) return CUDA_ERROR_INVALID_VALUE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

WEAK CUresult cuStreamCreate(void** stream, unsigned int flags) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  pthread_mutex_lock(&mu);
  *stream = new_stream(t_current, !(flags & STREAM_NON_BLOCKING), 0);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

WEAK CUresult cuMemAllocManaged(CUdeviceptr* p, size_t n, unsigned int flags) {
  CALLED();
  (void)flags;
  CUresult r = need_ctx();
  if (r) return r;
  void* m = fakecudaMalloc(t_current->dev, n);
  if (m == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}

/* stream_of resolves a stream handle and checks that it belongs to the current
 * context. mu held. */
static CUresult stream_of(void* stream, fakeStream** s) {
  CUresult r = resolve(stream, s);
  if (r) return r;
  return stream_ctx_ok(*s);
}

WEAK CUresult cuMemsetD32Async(CUdeviceptr p, unsigned int bits, size_t n, void* stream) {
  CALLED();
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = stream_of(stream, &s);
  alloc* a = find((void*)(uintptr_t)p, n * 4, 1);
  if (r == CUDA_SUCCESS && (a == NULL || !a->live)) r = CUDA_ERROR_INVALID_VALUE;
  if (r) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  op* o = calloc(1, sizeof *o);
  o->kind = OP_FILL; /* a float fill is a 32-bit memset of the float's bits */
  o->dst = (char*)(uintptr_t)p;
  o->n = n;
  memcpy(&o->value, &bits, sizeof bits);
  push(s, o);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* A host function in flight: the stream records `ran_before` when it gets to it, then
 * waits on `done`, which the function's thread records once the function returned. */
typedef struct hostcall {
  void (*fn)(void*);
  void* arg;
  fakeEvent ran_before, done;
  fakeStream* s;
  unsigned long ticket; /* the stream's wait op: once it ran, nothing refers to us */
} hostcall;

static void* hostcall_thread(void* arg) {
  hostcall* h = arg;
  pthread_mutex_lock(&mu);
  while (h->ran_before.completed < 1) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  h->fn(h->arg);
  pthread_mutex_lock(&mu);
  h->done.completed = 1;
  pthread_cond_broadcast(&cv);
  while (h->s->done < h->ticket) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  free(h);
  return NULL;
}

WEAK CUresult cuLaunchHostFunc(void* stream, void (*fn)(void*), void* arg) {
  CALLED();
  if (fn == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = stream_of(stream, &s);
  if (r) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  if (s->capturing) { /* a host node in the graph: never run here */
    g_count.captured_ops++;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
  }
  hostcall* h = calloc(1, sizeof *h);
  h->fn = fn;
  h->arg = arg;
  h->s = s;
  h->ran_before.ctx = h->done.ctx = s->ctx;
  op* rec = calloc(1, sizeof *rec);
  rec->kind = OP_RECORD;
  rec->ev = &h->ran_before;
  rec->gen = 1;
  push(s, rec);
  op* wait = calloc(1, sizeof *wait);
  wait->kind = OP_WAIT;
  wait->ev = &h->done;
  wait->gen = 1;
  push(s, wait);
  h->ticket = s->pushed;
  pthread_t t;
  pthread_create(&t, NULL, hostcall_thread, h);
  pthread_detach(t);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* A captured graph: nothing but a handle to destroy. */
typedef struct fakeGraph {
  fakeStream* from;
} fakeGraph;

WEAK CUresult cuStreamBeginCapture_v2(void* stream, int mode) {
  CALLED();
  (void)mode;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = stream_of(stream, &s);
  if (r == CUDA_SUCCESS && (s->legacy || s->capturing)) r = CUDA_ERROR_ILLEGAL_STATE;
  if (r == CUDA_SUCCESS) s->capturing = 1;
  pthread_mutex_unlock(&mu);
  return r;
}

WEAK CUresult cuStreamEndCapture(void* stream, void** graph) {
  CALLED();
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = stream_of(stream, &s);
  if (r == CUDA_SUCCESS && !s->capturing) r = CUDA_ERROR_ILLEGAL_STATE;
  if (r == CUDA_SUCCESS) {
    s->capturing = 0;
    fakeGraph* g = calloc(1, sizeof *g);
    g->from = s;
    *graph = g;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

WEAK CUresult cuGraphDestroy(void* graph) {
  CALLED();
  if (graph == NULL) return CUDA_ERROR_INVALID_VALUE;
  free(graph);
  return CUDA_SUCCESS;
}
