/*
 * fakecuda.c: a fake CUDA driver for gonccl's tests (see fakecuda.h).
 *
 * Build: gcc -shared -fPIC -O1 -pthread -o libfakecuda.so fakecuda.c
 *
 * What it models, so that gonccl's staging logic is exercised for real:
 * - device memory: malloc'd host memory in a table of allocations with a device ordinal;
 *   copies check their device range against it when queued (CUDA_ERROR_INVALID_VALUE)
 *   and again when they run (bad_access: freed in between);
 * - contexts: one per device, current per thread; calls that need a context refuse to
 *   run without one (CUDA_ERROR_INVALID_CONTEXT) or with another device's
 *   (CUDA_ERROR_INVALID_HANDLE), as the real driver does;
 * - streams: FIFO queues, each drained by its own thread, every operation after a
 *   configurable random delay; events with record generations; cuStreamWaitEvent;
 * - pinned host memory: tracked, poisoned on free; a copy that runs on freed pinned
 *   memory counts as bad_access, and a copy queued on host memory that a pending
 *   operation of another stream still uses counts as a host race;
 * - the special stream handles, resolved on the calling thread as the driver does:
 *   NULL and CU_STREAM_LEGACY (0x1) are the legacy default stream of the current
 *   context, CU_STREAM_PER_THREAD (0x2) the calling thread's own default stream. The
 *   legacy stream synchronizes with blocking streams (flags 0: per-thread streams and
 *   fakecudaStreamCreate's) both ways, and not with CU_STREAM_NON_BLOCKING ones, so a
 *   consumer on the default stream that is not ordered after a non-blocking stream's
 *   copies really runs before them;
 * - stream capture (fakecudaBeginCapture): work queued on a capturing stream is
 *   recorded, not run, and an event recorded there is not a real record, as in a graph;
 * - primary contexts: cuDevicePrimaryCtxRetain/Release are counted;
 * - consumers: fakecudaCheckF32 compares memory with the expected value when it runs
 *   and counts stale_reads.
 */
#define _GNU_SOURCE
#include "fakecuda.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
};

#define STREAM_LEGACY ((void*)0x1)
#define STREAM_PER_THREAD ((void*)0x2)
#define STREAM_NON_BLOCKING 0x1

#define NDEV 8
#define POISON 0xDB

typedef struct fakeCtx {
  int dev;
} fakeCtx;

static fakeCtx g_ctx[NDEV];
static __thread fakeCtx* t_current;

typedef struct alloc {
  char* p;
  size_t n;
  int dev;      /* -1: pinned host memory */
  int live;
  struct alloc* next;
} alloc;

typedef struct fakeEvent {
  fakeCtx* ctx;
  unsigned long recorded, completed;
  int destroyed;
} fakeEvent;

enum { OP_COPY, OP_RECORD, OP_WAIT, OP_FILL, OP_ADD, OP_CHECK };

/* An op runs only once the ops of other streams it depends on (the legacy default
 * stream's implicit synchronization) have run: stream s has run its op number ticket. */
typedef struct dep {
  struct fakeStream* s;
  unsigned long ticket;
} dep;

typedef struct op {
  int kind;
  char *dst, *src;   /* OP_COPY */
  size_t n;
  int dtoh;          /* OP_COPY: direction, for counters and host-side checks */
  char* host;        /* OP_COPY: the host side */
  int host_writes;
  fakeEvent* ev;     /* OP_RECORD / OP_WAIT */
  unsigned long gen;
  float value;       /* OP_FILL / OP_ADD */
  unsigned delay_us; /* extra delay of a fake kernel */
  dep* deps;         /* implicit synchronization with other streams */
  int ndeps;
  struct fakeStream* stream;
  struct op* next;
} op;

typedef struct fakeStream {
  fakeCtx* ctx;
  op *head, *tail;
  int busy;
  int legacy;    /* the context's legacy default stream */
  int blocking;  /* synchronizes with the legacy stream (flags 0, per-thread streams) */
  int capturing; /* under stream capture: work is recorded into a graph, not run */
  unsigned long pushed, done; /* ops queued and ops run, counted from 1 */
  unsigned delay_us;          /* extra delay of every op of this stream */
  pthread_t thread;
  struct fakeStream* next;
} fakeStream;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static alloc* g_allocs;
static fakeStream* g_streams;
static unsigned g_delay_min = 0, g_delay_max = 200;
static fakecudaCounters g_count;
static int g_initialized;
static fakeStream* g_legacy[NDEV];
static __thread fakeStream* t_per_thread[NDEV];
static long g_primary[NDEV];

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

/* find returns the allocation holding [p, p+n), live or freed, or NULL. mu held. */
static alloc* find(const void* p, size_t n, int dev_kind) {
  for (alloc* a = g_allocs; a; a = a->next) {
    if ((dev_kind && a->dev < 0) || (!dev_kind && a->dev >= 0)) continue;
    if ((const char*)p >= a->p && (const char*)p + n <= a->p + a->n) return a;
  }
  return NULL;
}

static alloc* track(char* p, size_t n, int dev) {
  alloc* a = calloc(1, sizeof *a);
  a->p = p;
  a->n = n;
  a->dev = dev;
  a->live = 1;
  a->next = g_allocs;
  g_allocs = a;
  return a;
}

/* Context checks. mu need not be held. */
static CUresult need_ctx(void) {
  if (t_current == NULL) {
    __atomic_add_fetch(&g_count.context_errors, 1, __ATOMIC_SEQ_CST);
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  return CUDA_SUCCESS;
}

static CUresult stream_ctx_ok(fakeStream* s) {
  CUresult r = need_ctx();
  if (r) return r;
  if (s->ctx != t_current) {
    __atomic_add_fetch(&g_count.context_errors, 1, __ATOMIC_SEQ_CST);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

static int is_stream(void* h) {
  for (fakeStream* s = g_streams; s; s = s->next)
    if ((void*)s == h) return 1;
  return 0;
}

static void* worker(void* arg);

/* new_stream creates a stream of ctx with its worker thread. mu held. */
static fakeStream* new_stream(fakeCtx* ctx, int blocking, int legacy) {
  fakeStream* s = calloc(1, sizeof *s);
  s->ctx = ctx;
  s->blocking = blocking;
  s->legacy = legacy;
  s->next = g_streams;
  g_streams = s;
  pthread_create(&s->thread, NULL, worker, s);
  pthread_detach(s->thread);
  return s;
}

/* resolve turns a stream handle into a stream, as the driver does on the calling
 * thread: NULL and CU_STREAM_LEGACY name the current context's legacy default stream,
 * CU_STREAM_PER_THREAD this thread's default stream of the current context. mu held. */
static CUresult resolve(void* h, fakeStream** out) {
  if (h == NULL || h == STREAM_LEGACY || h == STREAM_PER_THREAD) {
    if (t_current == NULL) {
      g_count.context_errors++;
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    int dev = t_current->dev;
    if (h == STREAM_PER_THREAD) {
      if (t_per_thread[dev] == NULL) t_per_thread[dev] = new_stream(t_current, 1, 0);
      *out = t_per_thread[dev];
    } else {
      if (g_legacy[dev] == NULL) g_legacy[dev] = new_stream(t_current, 1, 1);
      *out = g_legacy[dev];
    }
    return CUDA_SUCCESS;
  }
  if (!is_stream(h)) return CUDA_ERROR_INVALID_HANDLE;
  *out = h;
  return CUDA_SUCCESS;
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
  pthread_mutex_unlock(&mu);
  pause_us(d);
  pthread_mutex_lock(&mu);
  switch (o->kind) {
    case OP_COPY: {
      char* dev = o->dtoh ? o->src : o->dst;
      alloc* da = find(dev, o->n, 1);
      alloc* ha = find(o->host, o->n, 0);
      if (da == NULL || !da->live || (ha != NULL && !ha->live)) {
        g_count.bad_access++;
        break;
      }
      memcpy(o->dst, o->src, o->n);
      if (o->dtoh) g_count.dtoh++; else g_count.htod++;
      break;
    }
    case OP_RECORD:
      if (o->ev->destroyed) g_count.bad_access++;
      if (o->gen > o->ev->completed) o->ev->completed = o->gen;
      break;
    case OP_WAIT:
      while (o->ev->completed < o->gen) pthread_cond_wait(&cv, &mu);
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
    while (s->head == NULL || !deps_done(s->head)) pthread_cond_wait(&cv, &mu);
    op* o = s->head;
    s->busy = 1;
    run(o);
    s->head = o->next;
    if (s->head == NULL) s->tail = NULL;
    s->busy = 0;
    s->done++;
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
static void push(fakeStream* s, op* o) {
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
  if (s->tail) s->tail->next = o; else s->head = o;
  s->tail = o;
  pthread_cond_broadcast(&cv);
}

/* races counts pending copies of other streams on overlapping host memory where one
 * side writes it. mu held. */
static void check_races(fakeStream* s, char* host, size_t n, int writes) {
  for (fakeStream* t = g_streams; t; t = t->next) {
    if (t == s) continue;
    for (op* o = t->head; o; o = o->next) {
      if (o->kind != OP_COPY) continue;
      if (!(writes || o->host_writes)) continue;
      if (host < o->host + o->n && o->host < host + n) g_count.host_races++;
    }
  }
}

/* ---- driver entry points ---- */

CUresult cuInit(unsigned int flags) {
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
  switch (r) {
    case CUDA_SUCCESS: *out = "CUDA_SUCCESS"; return 0;
    case CUDA_ERROR_INVALID_VALUE: *out = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case CUDA_ERROR_OUT_OF_MEMORY: *out = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case CUDA_ERROR_NOT_INITIALIZED: *out = "CUDA_ERROR_NOT_INITIALIZED"; return 0;
    case CUDA_ERROR_NO_DEVICE: *out = "CUDA_ERROR_NO_DEVICE"; return 0;
    case CUDA_ERROR_INVALID_CONTEXT: *out = "CUDA_ERROR_INVALID_CONTEXT"; return 0;
    case CUDA_ERROR_INVALID_HANDLE: *out = "CUDA_ERROR_INVALID_HANDLE"; return 0;
    case CUDA_ERROR_NOT_READY: *out = "CUDA_ERROR_NOT_READY"; return 0;
  }
  *out = NULL;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuCtxGetCurrent(void** ctx) {
  *ctx = t_current;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(void* ctx) {
  if (ctx != NULL && ((fakeCtx*)ctx < g_ctx || (fakeCtx*)ctx >= g_ctx + NDEV)) return CUDA_ERROR_INVALID_CONTEXT;
  t_current = ctx;
  return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(void* stream, void** ctx) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) *ctx = s->ctx;
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr ptr) {
  pthread_mutex_lock(&mu);
  alloc* a = find((void*)(uintptr_t)ptr, 1, 1);
  CUresult r = CUDA_SUCCESS;
  if (a == NULL || !a->live) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (attr == 9) { /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
    *(int*)data = a->dev;
  } else if (attr == 1) { /* CU_POINTER_ATTRIBUTE_CONTEXT */
    *(void**)data = &g_ctx[a->dev];
  } else {
    r = CUDA_ERROR_INVALID_VALUE;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuMemHostAlloc(void** pp, size_t n, unsigned int flags) {
  (void)flags;
  CUresult r = need_ctx();
  if (r) return r;
  char* p = malloc(n ? n : 1);
  if (p == NULL) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(p, POISON, n);
  pthread_mutex_lock(&mu);
  track(p, n, -1);
  g_count.host_allocs++;
  g_count.host_live++;
  pthread_mutex_unlock(&mu);
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void* p) {
  CUresult r = need_ctx();
  if (r) return r;
  pthread_mutex_lock(&mu);
  alloc* a = find(p, 1, 0);
  if (a == NULL || !a->live || a->p != p) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  /* Poisoned and kept: a queued copy that still uses it is detected when it runs. */
  a->live = 0;
  memset(a->p, POISON, a->n);
  g_count.host_frees++;
  g_count.host_live--;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

static CUresult copy(void* dst, void* src, size_t n, void* stream, int dtoh) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  r = stream_ctx_ok(s);
  void* dev = dtoh ? src : dst;
  char* host = dtoh ? dst : src;
  alloc* a = find(dev, n, 1);
  if (r == CUDA_SUCCESS && (a == NULL || !a->live)) r = CUDA_ERROR_INVALID_VALUE;
  if (r) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  check_races(s, host, n, dtoh);
  op* o = calloc(1, sizeof *o);
  o->kind = OP_COPY;
  o->dst = dst;
  o->src = src;
  o->n = n;
  o->dtoh = dtoh;
  o->host = host;
  o->host_writes = dtoh;
  push(s, o);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* stream) {
  return copy(dst, (void*)(uintptr_t)src, n, stream, 1);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream) {
  return copy((void*)(uintptr_t)dst, (void*)src, n, stream, 0);
}

CUresult cuEventCreate(void** ev, unsigned int flags) {
  (void)flags;
  CUresult r = need_ctx();
  if (r) return r;
  fakeEvent* e = calloc(1, sizeof *e);
  e->ctx = t_current;
  pthread_mutex_lock(&mu);
  g_count.events_created++;
  pthread_mutex_unlock(&mu);
  *ev = e;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(void* ev, void* stream) {
  pthread_mutex_lock(&mu);
  fakeEvent* e = ev;
  fakeStream* s = NULL;
  if (e == NULL || e->destroyed || resolve(stream, &s) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (e->ctx != s->ctx) {
    g_count.context_errors++;
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  op* o = calloc(1, sizeof *o);
  o->kind = OP_RECORD;
  o->ev = e;
  /* A record into a graph under capture is a node of the graph, not a record. */
  o->gen = s->capturing ? e->recorded : ++e->recorded;
  push(s, o);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(void* ev) {
  pthread_mutex_lock(&mu);
  fakeEvent* e = ev;
  CUresult r = e->destroyed ? CUDA_ERROR_INVALID_HANDLE
               : e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuEventSynchronize(void* ev) {
  pthread_mutex_lock(&mu);
  fakeEvent* e = ev;
  if (e->destroyed) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  unsigned long want = e->recorded;
  while (e->completed < want) pthread_cond_wait(&cv, &mu);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(void* ev) {
  pthread_mutex_lock(&mu);
  fakeEvent* e = ev;
  if (e == NULL || e->destroyed) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  /* Kept (never freed): a queued wait may still read it, as the real driver allows. */
  e->destroyed = 1;
  g_count.events_destroyed++;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(void* stream, void* ev, unsigned int flags) {
  (void)flags;
  pthread_mutex_lock(&mu);
  fakeEvent* e = ev;
  fakeStream* s = NULL;
  if (e == NULL || e->destroyed || resolve(stream, &s) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  op* o = calloc(1, sizeof *o);
  o->kind = OP_WAIT;
  o->ev = e;
  o->gen = e->recorded;
  push(s, o);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(void* stream) {
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
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) *status = s->capturing ? 1 : 0; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuCtxGetDevice(int* dev) {
  CUresult r = need_ctx();
  if (r) return r;
  *dev = t_current->dev;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= NDEV) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  g_primary[dev]++;
  g_count.primary_retained++;
  pthread_mutex_unlock(&mu);
  *ctx = &g_ctx[dev];
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  if (dev < 0 || dev >= NDEV) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  CUresult r = CUDA_SUCCESS;
  if (g_primary[dev] == 0) {
    r = CUDA_ERROR_INVALID_CONTEXT; /* released more often than retained */
  } else {
    g_primary[dev]--;
    g_count.primary_retained--;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

/* ---- test hooks ---- */

void* fakecudaMalloc(int dev, size_t bytes) {
  if (dev < 0 || dev >= NDEV) return NULL;
  char* p = malloc(bytes ? bytes : 1);
  if (p == NULL) return NULL;
  memset(p, POISON, bytes);
  pthread_mutex_lock(&mu);
  track(p, bytes, dev);
  pthread_mutex_unlock(&mu);
  return p;
}

int fakecudaFree(void* p) {
  pthread_mutex_lock(&mu);
  alloc* a = find(p, 1, 1);
  if (a == NULL || !a->live || a->p != p) {
    pthread_mutex_unlock(&mu);
    return -1;
  }
  a->live = 0;
  memset(a->p, POISON, a->n);
  pthread_mutex_unlock(&mu);
  return 0;
}

void* fakecudaStreamCreateWithFlags(int dev, unsigned flags) {
  if (dev < 0 || dev >= NDEV) return NULL;
  for (int i = 0; i < NDEV; i++) g_ctx[i].dev = i;
  pthread_mutex_lock(&mu);
  fakeStream* s = new_stream(&g_ctx[dev], !(flags & STREAM_NON_BLOCKING), 0);
  pthread_mutex_unlock(&mu);
  return s;
}

void* fakecudaStreamCreate(int dev) { return fakecudaStreamCreateWithFlags(dev, 0); }

static int set_capture(void* stream, int on) {
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) s->capturing = on;
  pthread_mutex_unlock(&mu);
  return r == CUDA_SUCCESS ? 0 : -1;
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
int fakecudaEndCapture(void* stream) { return set_capture(stream, 0); }

void* fakecudaContext(int dev) {
  if (dev < 0 || dev >= NDEV) return NULL;
  return &g_ctx[dev];
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

int fakecudaStreamDrain(void* stream) { return cuStreamSynchronize(stream) == CUDA_SUCCESS ? 0 : -1; }

void fakecudaGetCounters(fakecudaCounters* out) {
  pthread_mutex_lock(&mu);
  *out = g_count;
  pthread_mutex_unlock(&mu);
}
