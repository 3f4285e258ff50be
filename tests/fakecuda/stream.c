/*
 * stream.c: the fake CUDA driver's streams (see fakecuda_internal.h): FIFO queues of
 * ops, each run by its own thread after a random delay once the ops of other streams
 * it implicitly synchronizes with have run; the special handles (legacy and per-thread
 * default streams); capture; and the fake kernels the tests queue.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"
#include "strict.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static unsigned g_delay_min = 0, g_delay_max = 200;
static unsigned g_copy_mibps; /* fakecudaSetCopyRate: 0, copies take no time of their own */
static fakeStream* g_legacy[NDEV];
static __thread fakeStream* t_per_thread[NDEV];
#define POOL_STREAMS 32
static fakeStream* g_pool[NDEV][POOL_STREAMS];
static unsigned g_pool_next[NDEV];

static unsigned rnd(void) {
  static __thread unsigned s;
  if (s == 0) s = (unsigned)(uintptr_t)&s ^ (unsigned)time(NULL) ^ (unsigned)getpid();
  s ^= s << 13;
  s ^= s >> 17;
  s ^= s << 5;
  return s;
}

static void pause_us(unsigned us) {
  if (us == 0) return;
  struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

static int is_stream(void* h) {
  for (fakeStream* s = g_streams; s; s = s->next)
    if ((void*)s == h) return 1;
  return 0;
}

static void* worker(void* arg);

/* new_stream creates a stream of ctx with its worker thread. mu held. */
fakeStream* new_stream(fakeCtx* ctx, int blocking, int legacy) {
  fakeStream* s = calloc(1, sizeof *s);
  s->ctx = ctx;
  s->gen = ctx->gen;
  s->blocking = blocking;
  s->legacy = legacy;
  s->hwq = hwq_assign(ctx);
  s->next = g_streams;
  g_streams = s;
  pthread_create(&s->thread, NULL, worker, s);
  pthread_detach(s->thread);
  return s;
}

/* resolve turns a stream handle into a stream, as the driver does on the calling
 * thread: NULL and CU_STREAM_LEGACY name the current context's legacy default stream,
 * CU_STREAM_PER_THREAD this thread's default stream of the current context. mu held. */
CUresult resolve(void* h, fakeStream** out) {
  if (h == NULL || h == STREAM_LEGACY || h == STREAM_PER_THREAD) {
    if (t_current == NULL) {
      g_count.context_errors++;
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (t_current->refs == 0)
      fault("a default stream used with the primary context of device %d current, which was reset", t_current->dev);
    int dev = t_current->dev;
    if (h == STREAM_PER_THREAD) {
      if (t_per_thread[dev] == NULL || t_per_thread[dev]->gen != t_current->gen)
        t_per_thread[dev] = new_stream(t_current, 1, 0);
      *out = t_per_thread[dev];
    } else {
      if (g_legacy[dev] == NULL) g_legacy[dev] = new_stream(t_current, 1, 1);
      *out = g_legacy[dev];
    }
    return CUDA_SUCCESS;
  }
  if (!is_stream(h)) return CUDA_ERROR_INVALID_HANDLE;
  fakeStream* s = h;
  if (s->destroyed) fault("stream %p used after cuStreamDestroy", h);
  if (!ctx_alive(s->ctx, s->gen))
    fault("stream %p used after its context (device %d) was reset: the real stream is gone", h, s->ctx->dev);
  *out = s;
  return CUDA_SUCCESS;
}

void forget_streams(fakeCtx* ctx) {
  g_legacy[ctx->dev] = NULL;
  for (int i = 0; i < POOL_STREAMS; i++) g_pool[ctx->dev][i] = NULL;
}

static void add_dep(op* o, fakeStream* s) {
  if (s->done >= s->pushed) return;
  o->deps = realloc(o->deps, (size_t)(o->ndeps + 1) * sizeof *o->deps);
  o->deps[o->ndeps].s = s;
  o->deps[o->ndeps].ticket = s->pushed;
  o->ndeps++;
}

static int deps_done(op* o) {
  for (int i = 0; i < o->ndeps; i++)
    if (o->deps[i].s->done < o->deps[i].ticket) return 0;
  return 1;
}

/* run executes one op; mu held on entry and exit, released around the delay. */
static void run(op* o) {
  unsigned d = g_delay_min + (g_delay_max > g_delay_min ? rnd() % (g_delay_max - g_delay_min + 1) : 0);
  d += o->delay_us + o->stream->delay_us;
  if (o->kind == OP_COPY && g_copy_mibps > 0) d += (unsigned)((double)o->n / (g_copy_mibps * 1.048576));
  pthread_mutex_unlock(&mu);
  pause_us(d);
  pthread_mutex_lock(&mu);
  switch (o->kind) {
    case OP_COPY: {
      char* dev = o->dtoh ? o->src : o->dst;
      alloc* da = find(dev, o->n, 1);
      alloc* ha = find(o->host, o->n, 0);
      if (ha != NULL && !ha->live) {
        /* The real DMA would read or write memory that is gone: say so, then touch
         * it as the copy would (PROT_NONE: SIGSEGV). */
        fprintf(stderr, "fakecuda: FAULT: a queued %s copy uses pinned memory %p that was freed\n",
                o->dtoh ? "device->host" : "host->device", (void*)o->host);
        fflush(stderr);
        g_count.bad_access++;
        memcpy(o->dst, o->src, o->n);
      }
      if (da == NULL || !da->live) {
        g_count.bad_access++;
        break;
      }
      if (o->dtoh)
        check_read(dev, o->n, "a device->host copy", 0);
      else
        check_write(dev, o->n, "a host->device copy", 0);
      memcpy(o->dst, o->src, o->n);
      if (o->dtoh) g_count.dtoh++; else g_count.htod++;
      break;
    }
    case OP_RECORD:
      if (o->ev->destroyed) g_count.bad_access++;
      if (o->gen > o->ev->completed) o->ev->completed = o->gen;
      ev_sync(o->ev);
      break;
    case OP_WAIT:
      while (o->ev->completed < o->gen) pthread_cond_wait(&cv, &mu);
      ts_hold(o->stream->ctx->dev);
      break;
    case OP_CHECK: {
      alloc* a = find(o->dst, o->n * sizeof(float), 1);
      if (a == NULL || !a->live) {
        g_count.bad_access++;
        break;
      }
      const float* f = (const float*)o->dst;
      for (size_t i = 0; i < o->n; i++) {
        if (f[i] != o->value) {
          g_count.stale_reads++;
          break;
        }
      }
      g_count.kernels++;
      break;
    }
    case OP_CALL:
      o->call(o);
      break;
    case OP_FILL:
    case OP_ADD: {
      alloc* a = find(o->dst, o->n * sizeof(float), 1);
      if (a == NULL || !a->live) {
        g_count.bad_access++;
        break;
      }
      float* f = (float*)o->dst;
      for (size_t i = 0; i < o->n; i++) f[i] = (o->kind == OP_FILL ? 0 : f[i]) + o->value;
      g_count.kernels++;
      break;
    }
  }
}

static void* worker(void* arg) {
  fakeStream* s = arg;
  pthread_mutex_lock(&mu);
  for (;;) {
    while (s->head == NULL || !deps_done(s->head) || !hwq_turn(s->head)) pthread_cond_wait(&cv, &mu);
    op* o = s->head;
    s->busy = 1;
    ts_enter(s->ctx->dev);
    run(o);
    ts_leave(s->ctx->dev);
    s->head = o->next;
    if (s->head == NULL) s->tail = NULL;
    s->busy = 0;
    s->done++;
    hwq_done(o);
    free(o->deps);
    free(o);
    pthread_cond_broadcast(&cv);
  }
  return NULL;
}

/* push queues o on s, after the work it implicitly synchronizes with: an op of the
 * legacy stream waits for every blocking stream of its context, an op of a blocking
 * stream for the legacy stream. On a capturing stream o is recorded into the graph
 * instead (freed here; nothing runs). mu held. */
void push(fakeStream* s, op* o) {
  if (s->capturing) {
    g_count.captured_ops++;
    free(o);
    return;
  }
  o->stream = s;
  if (s->legacy) {
    for (fakeStream* t = g_streams; t; t = t->next)
      if (t != s && t->ctx == s->ctx && t->blocking) add_dep(o, t);
  } else if (s->blocking && g_legacy[s->ctx->dev] != NULL) {
    add_dep(o, g_legacy[s->ctx->dev]);
  }
  s->pushed++;
  hwq_push(s, o);
  if (s->tail) s->tail->next = o; else s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&cv);
}

/* ---- driver entry points ---- */

CUresult cuStreamGetCtx(void* stream, void** ctx) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) *ctx = s->ctx;
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuStreamCreate(void** out, unsigned int flags) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  pthread_mutex_lock(&mu);
  *out = new_stream(t_current, !(flags & STREAM_NON_BLOCKING), 0);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* cuStreamDestroy_v2: the stream's queued work still runs (its worker drains it), as in
 * the real driver; the handle must not be used again (resolve faults). The struct is
 * kept, since other streams' ops may depend on its progress. */
CUresult cuStreamDestroy_v2(void* stream) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (stream == NULL || stream == STREAM_LEGACY || stream == STREAM_PER_THREAD) return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) s->destroyed = 1;
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuStreamSynchronize(void* stream) {
  CALLED();
  CUresult c = capture_unsafe("cuStreamSynchronize");
  if (c) return c;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  while (s->head != NULL) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing(void* stream, int* status) {
  CALLED();
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) *status = s->capturing ? 1 : 0; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
  pthread_mutex_unlock(&mu);
  return r;
}

/* ---- test hooks ---- */

void* fakecudaStreamCreateWithFlags(int dev, unsigned flags) {
  if (dev < 0 || dev >= NDEV) return NULL;
  for (int i = 0; i < NDEV; i++) g_ctx[i].dev = i;
  pthread_mutex_lock(&mu);
  runtime_init(dev);
  fakeStream* s = new_stream(&g_ctx[dev], !(flags & STREAM_NON_BLOCKING), 0);
  pthread_mutex_unlock(&mu);
  return s;
}

void* fakecudaStreamCreate(int dev) { return fakecudaStreamCreateWithFlags(dev, 0); }

void* fakecudaPoolStream(int dev) {
  if (dev < 0 || dev >= NDEV) return NULL;
  pthread_mutex_lock(&mu);
  runtime_init(dev);
  unsigned i = g_pool_next[dev]++ % POOL_STREAMS;
  if (g_pool[dev][i] == NULL) g_pool[dev][i] = new_stream(&g_ctx[dev], 0, 0);
  fakeStream* s = g_pool[dev][i];
  pthread_mutex_unlock(&mu);
  return s;
}

/* set_capture begins (on: in capture mode mode-1) or ends stream's capture: -1 for a
 * bad stream, -2 for a capture that was invalidated (capture.c). */
static int set_capture(void* stream, int on) {
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  int invalidated = 0;
  if (r == CUDA_SUCCESS) {
    s->capturing = on != 0;
    if (on) capture_begin(s, on - 1); else invalidated = capture_end(s);
  }
  pthread_mutex_unlock(&mu);
  return r != CUDA_SUCCESS ? -1 : invalidated ? -2 : 0;
}

int fakecudaStreamSetDelay(void* stream, unsigned us) {
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) s->delay_us = us;
  pthread_mutex_unlock(&mu);
  return r == CUDA_SUCCESS ? 0 : -1;
}

int fakecudaBeginCapture(void* stream) { return set_capture(stream, 1); }
int fakecudaBeginCaptureMode(void* stream, int mode) {
  return mode < 0 || mode > 2 ? -1 : set_capture(stream, mode + 1);
}
int fakecudaEndCapture(void* stream) { return set_capture(stream, 0); }

void fakecudaSetCopyRate(unsigned mib_per_s) {
  pthread_mutex_lock(&mu);
  g_copy_mibps = mib_per_s;
  pthread_mutex_unlock(&mu);
}

void fakecudaSetDelay(unsigned min_us, unsigned max_us) {
  pthread_mutex_lock(&mu);
  g_delay_min = min_us;
  g_delay_max = max_us < min_us ? min_us : max_us;
  pthread_mutex_unlock(&mu);
}

static int kernel(void* stream, void* p, size_t count, float value, unsigned delay_us, int kind) {
  pthread_mutex_lock(&mu);
  alloc* a = find(p, count * sizeof(float), 1);
  fakeStream* s = NULL;
  if (resolve(stream, &s) != CUDA_SUCCESS || a == NULL || !a->live) {
    pthread_mutex_unlock(&mu);
    return -1;
  }
  op* o = calloc(1, sizeof *o);
  o->kind = kind;
  o->dst = p;
  o->n = count;
  o->value = value;
  o->delay_us = delay_us;
  push(s, o);
  pthread_mutex_unlock(&mu);
  return 0;
}

int fakecudaFillF32(void* stream, void* p, size_t count, float value, unsigned delay_us) {
  return kernel(stream, p, count, value, delay_us, OP_FILL);
}

int fakecudaAddF32(void* stream, void* p, size_t count, float value, unsigned delay_us) {
  return kernel(stream, p, count, value, delay_us, OP_ADD);
}

int fakecudaCheckF32(void* stream, void* p, size_t count, float want, unsigned delay_us) {
  return kernel(stream, p, count, want, delay_us, OP_CHECK);
}

int fakecudaStreamDrain(void* stream) {
  t_hook = 1;
  CUresult r = cuStreamSynchronize(stream);
  t_hook = 0;
  return r == CUDA_SUCCESS ? 0 : -1;
}
