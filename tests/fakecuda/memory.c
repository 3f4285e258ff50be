/*
 * memory.c: the fake CUDA driver's memory (see fakecuda_internal.h): the table of
 * device and pinned host allocations, pointer attributes, and the asynchronous copies
 * between them, checked when queued and again when they run (stream.c).
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"
#include "strict.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static alloc* g_allocs;

/* find returns the allocation holding [p, p+n), live or freed, or NULL. mu held. */
alloc* find(const void* p, size_t n, int dev_kind) {
  for (alloc* a = g_allocs; a; a = a->next) {
    if ((dev_kind && a->dev < 0) || (!dev_kind && a->dev >= 0)) continue;
    if ((const char*)p >= a->p && (const char*)p + n <= a->p + a->n) return a;
  }
  return NULL;
}

alloc* track(char* p, size_t n, int dev) {
  alloc* a = calloc(1, sizeof *a);
  a->p = p;
  a->n = n;
  a->dev = dev;
  a->live = 1;
  static unsigned long long next_id;
  a->id = ++next_id;
  a->next = g_allocs;
  g_allocs = a;
  return a;
}

/* waits_for reports whether work queued next on s runs after o, pending on another stream:
 * s has a pending wait for an event whose record is queued after o on its stream. mu
 * held. */
static int waits_for(fakeStream* s, op* o) {
  for (op* w = s->head; w; w = w->next) {
    if (w->kind != OP_WAIT) continue;
    for (op* r = o->next; r; r = r->next) {
      if (r->kind == OP_RECORD && r->ev == w->ev && r->gen == w->gen) return 1;
    }
  }
  return 0;
}

/* races counts pending copies of other streams on overlapping host memory where one
 * side writes it, unless the new copy's stream waits for them (cuStreamWaitEvent on an
 * event recorded after them). mu held. */
static void check_races(fakeStream* s, char* host, size_t n, int writes) {
  for (fakeStream* t = g_streams; t; t = t->next) {
    if (t == s) continue;
    for (op* o = t->head; o; o = o->next) {
      if (o->kind != OP_COPY) continue;
      if (!(writes || o->host_writes)) continue;
      if (host < o->host + o->n && o->host < host + n && !waits_for(s, o)) g_count.host_races++;
    }
  }
}

/* ---- driver entry points ---- */

CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr ptr) {
  CALLED();
  /* Like the driver: a context must be current (CUDA_ERROR_INVALID_CONTEXT), though with
   * unified addressing any context answers for a pointer of any device. */
  CUresult c = need_ctx();
  if (c) return c;
  pthread_mutex_lock(&mu);
  alloc* a = find((void*)(uintptr_t)ptr, 1, 1);
  CUresult r = CUDA_SUCCESS;
  if (a == NULL || !a->live) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (attr == 2) { /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE: HOST (pinned) or DEVICE */
    *(unsigned*)data = a->dev < 0 ? 1 : 2;
  } else if (attr == 9) { /* CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL */
    *(int*)data = a->dev;
  } else if (attr == 1) { /* CU_POINTER_ATTRIBUTE_CONTEXT */
    *(void**)data = &g_ctx[a->dev];
  } else if (attr == 7) { /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
    *(unsigned long long*)data = a->id;
  } else if (attr == 11) { /* CU_POINTER_ATTRIBUTE_RANGE_START_ADDR */
    *(CUdeviceptr*)data = (CUdeviceptr)(uintptr_t)a->p;
  } else if (attr == 12) { /* CU_POINTER_ATTRIBUTE_RANGE_SIZE */
    *(size_t*)data = a->n;
  } else if (attr == 10) { /* CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE */
    /* Only cuMemAlloc memory (ipc.c) is: not pool memory (pool.c), not cuMemMap'ed
     * memory (vmm.c), not an IPC mapping, not pinned host memory. */
    *(int*)data = ipc_exportable(a->p);
  } else if (attr == 17) { /* CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: NULL unless pool memory */
    *(void**)data = a->pool;
  } else {
    r = CUDA_ERROR_INVALID_VALUE;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

/* unpin poisons a pinned block and takes it away: any later host access or queued copy
 * dies of SIGSEGV, as on a real driver that unmapped it. Kept mapped (PROT_NONE), so
 * the address is never handed out again. mu held. */
static void unpin(alloc* a) {
  a->live = 0;
  memset(a->p, POISON, a->n);
  if (mprotect(a->p, a->mapped, PROT_NONE) != 0) fault("mprotect of freed pinned memory failed");
}

void kill_allocs(fakeCtx* ctx) {
  for (alloc* a = g_allocs; a; a = a->next) {
    if (!a->live) continue;
    if (a->dev < 0 && a->ctx == ctx) {
      unpin(a);
      g_count.host_live--;
    } else if (a->dev == ctx->dev && !a->vmm) {
      a->live = 0;
      memset(a->p, POISON, a->n);
    }
  }
}

CUresult cuMemHostAlloc(void** pp, size_t n, unsigned int flags) {
  CALLED();
  (void)flags;
  CUresult r = need_ctx();
  if (r || (r = capture_unsafe("cuMemHostAlloc"))) return r;
  drain_ctx("cuMemHostAlloc");
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t mapped = ((n ? n : 1) + page - 1) / page * page;
  char* p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  memset(p, POISON, n);
  pthread_mutex_lock(&mu);
  alloc* a = track(p, n, -1);
  a->mapped = mapped;
  a->ctx = t_current;
  g_count.host_allocs++;
  g_count.host_live++;
  pthread_mutex_unlock(&mu);
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult cuMemFreeHost(void* p) {
  CALLED();
  CUresult r = need_ctx();
  if (r || (r = capture_unsafe("cuMemFreeHost"))) return r;
  drain_ctx("cuMemFreeHost");
  pthread_mutex_lock(&mu);
  alloc* a = find(p, 1, 0);
  if (a == NULL || !a->live || a->p != p) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  unpin(a);
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
  CALLED();
  return copy(dst, (void*)(uintptr_t)src, n, stream, 1);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* stream) {
  CALLED();
  return copy((void*)(uintptr_t)dst, (void*)src, n, stream, 0);
}

/* ---- test hooks ---- */

/* Untracked bytes after every device allocation: an address a little past the end of
 * one is never inside the next, so a buffer shorter than its count is caught however
 * malloc lays out the blocks (without it, test_bad's short buffer was sometimes taken
 * for device memory when the next block was a live allocation, and the test flaked). */
#define ALLOC_GUARD 4096

void* fakecudaMalloc(int dev, size_t bytes) {
  if (dev < 0 || dev >= NDEV) return NULL;
  char* p = malloc((bytes ? bytes : 1) + ALLOC_GUARD);
  if (p == NULL) return NULL;
  memset(p, POISON, bytes);
  pthread_mutex_lock(&mu);
  runtime_init(dev);
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
