/*
 * module.c: the fake CUDA driver's modules and kernel launches (see
 * fakecuda_internal.h). cuModuleLoadData accepts a fatbin (gonccl's: its magic and
 * header are checked, the image kept), cuModuleGetFunction finds a kernel whose name is
 * both in the image and in the table of host implementations (kernels_host.cc, compiled
 * from the same source as the device kernels), and cuLaunchKernel queues the host
 * implementation on the stream, reading kernelParams as the real launch does (the
 * one-pass kernels' struct parameter is copied at the launch, as the driver copies it).
 *
 * A launch is two ordinary stream ops, so ordering, delays and the legacy stream's
 * synchronization apply to it as to copies: a record of a private start event, then a
 * wait for a private end event. The module's runner thread runs the kernel, every
 * thread of its grid in turn, once the start event has completed, and then completes
 * the end event, which lets the stream go on. When it runs, a kernel whose buffers are
 * no longer live device memory counts as bad_access and touches nothing.
 *
 * A kernel that takes an abort word (reduce.cuh's aborted: the two-operand and one-pass
 * reductions) reads it first, when it runs: set, the kernel touches no buffer and counts
 * in kernels_aborted. One that reads memory another process made and has since died
 * (vmm.c: memory that outlives its maker, still valid) counts in dead_maker_kernel_reads:
 * it computes on what a dead rank left there, which gonccl's released operations must
 * not do (the device path sets the abort word first).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda_internal.h"
#include "strict.h"
#include "kernels_host.h"

enum {
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_NOT_FOUND = 500,
};

#define FATBIN_MAGIC 0xba55ed50u /* the fatbin header's first word, little-endian */

typedef struct fakeModule {
  fakeCtx* ctx;
  unsigned gen; /* its context's generation at the load: a reset unloads it */
  char* image;
  size_t size;
  int unloaded;
  struct fakeModule* next;
} fakeModule;

typedef struct fakeFunction {
  fakeModule* m;
  const hostKernel* k;
  int loaded; /* loaded eagerly (CUDA_MODULE_LOADING=EAGER), by cuFuncLoad, or launched */
  struct fakeFunction* next;
} fakeFunction;

typedef struct launch {
  const hostKernel* k;
  void *a, *b; /* reduce: dst, src; divide: buf */
  const unsigned* abort; /* reduce: the abort word (multi: in m) */
  hostMultiArgs m; /* multi: the parameter struct, copied at launch as the driver does */
  unsigned long long count, nthreads;
  long long n;
  int corrupt;
  fakeEvent start, end;
  fakeStream* s;
  unsigned long ticket; /* the stream's op number of the end wait */
  int ran;
  struct launch* next;
} launch;

/* All guarded by mu. */
static fakeModule* g_modules;
static fakeFunction* g_functions;
static launch* g_launches;
static char* g_corrupt;
static int g_runner;

static int is_module(fakeModule* m) {
  for (fakeModule* x = g_modules; x; x = x->next)
    if (x == m) return 1;
  return 0;
}

static int is_function(fakeFunction* f) {
  for (fakeFunction* x = g_functions; x; x = x->next)
    if (x == f) return 1;
  return 0;
}

static const hostKernel* host_kernel(const char* name) {
  for (int i = 0; i < fakecuda_host_kernel_count; i++)
    if (strcmp(fakecuda_host_kernels[i].name, name) == 0) return &fakecuda_host_kernels[i];
  return NULL;
}

static int live_range(const void* p, size_t bytes) {
  alloc* a = find((void*)p, bytes, 1);
  return a != NULL && a->live;
}

/* multi_ok says whether a one-pass launch names 1..HOST_MULTI_MAX inputs and at most
 * HOST_MULTI_MAX outputs, all live device memory for its count. */
static int multi_ok(const launch* l) {
  const hostMultiArgs* m = &l->m;
  if (m->nin < 1 || m->nin > HOST_MULTI_MAX || m->nout < 0 || m->nout > HOST_MULTI_MAX) return 0;
  size_t bytes = (size_t)m->count * l->k->elem;
  for (int i = 0; i < m->nin; i++)
    if (!live_range(m->in[i], bytes)) return 0;
  for (int i = 0; i < m->nout; i++)
    if (!live_range(m->out[i], bytes)) return 0;
  return 1;
}

/* check_device faults where a kernel (or a stream memory operation, ipc.c) on a stream
 * of device dev touches device memory
 * [p, p+n) that dev may not access: memory of another GPU from cuMemAlloc (that needs
 * cuCtxEnablePeerAccess, which gonccl never calls, or a mapping opened with
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), or cuMemMap'ed memory without cuMemSetAccess for
 * dev. On a GPU that is an illegal-address fault, sticky. Pinned and registered host
 * memory is every device's. mu held. */
void check_device(const void* p, size_t n, int dev, const char* what) {
  alloc* a = find(p, n, 1);
  if (a == NULL || !a->live) return; /* host memory, or counted as bad_access */
  if (a->vmm) {
    if (!(a->access & (1u << dev)))
      fault("%s on device %d touches memory %p that cuMemSetAccess gave device %d no access to", what, dev, p, dev);
    return;
  }
  if (physical(a->dev) == physical(dev) || (a->lazy_peer && peer_ok(physical(dev), physical(a->dev)))) return;
  fault("%s on device %d touches device memory %p of device %d without peer access (cuCtxEnablePeerAccess)", what,
        dev, p, a->dev);
}

/* execute runs l's kernel: mu held on entry and exit, released while it computes. */
static void execute(launch* l) {
  size_t bytes = (size_t)l->count * l->k->elem;
  const unsigned* word = l->k->multi ? l->m.abort : l->k->reduce ? l->abort : NULL;
  if (word != NULL && __atomic_load_n(word, __ATOMIC_SEQ_CST) != 0) {
    g_strict.kernels_aborted++;
    return;
  }
  int ok = l->k->multi ? multi_ok(l) : live_range(l->a, bytes) && (!l->k->reduce || live_range(l->b, bytes));
  if (!ok) {
    g_count.bad_access++;
    return;
  }
  int dev = l->s->ctx->dev;
  if (l->k->multi) {
    for (int i = 0; i < l->m.nin; i++) check_device(l->m.in[i], bytes, dev, "a kernel (its input)");
    for (int i = 0; i < l->m.nout; i++) check_device(l->m.out[i], bytes, dev, "a kernel (its output)");
  } else {
    check_device(l->a, bytes, dev, "a kernel");
    if (l->k->reduce) check_device(l->b, bytes, dev, "a kernel (its input)");
  }
  int dead = 0;
  if (l->k->multi) {
    for (int i = 0; i < l->m.nin; i++) dead |= maker_dead(l->m.in[i], bytes);
  } else if (l->k->reduce) {
    dead = maker_dead(l->a, bytes) || maker_dead(l->b, bytes);
  }
  if (dead) g_strict.dead_maker_kernel_reads++;
  if (l->k->multi) {
    for (int i = 0; i < l->m.nin; i++) check_read(l->m.in[i], bytes, "a kernel launch (its input)", 0);
    for (int i = 0; i < l->m.nout; i++) check_write(l->m.out[i], bytes, "a kernel launch (its output)", 0);
  } else {
    check_write(l->a, bytes, "a kernel launch (its output)", 0);
    check_read(l->a, bytes, "a kernel launch (its input)", 0);
    if (l->k->reduce) check_read(l->b, bytes, "a kernel launch (its input)", 0);
  }
  g_count.kernels++;
  /* The deliberately wrong implementation (fakecudaCorruptKernel) misses the last element. */
  unsigned long long count = l->corrupt && l->count > 0 ? l->count - 1 : l->count;
  l->m.count = count;
  pthread_mutex_unlock(&mu);
  for (unsigned long long tid = 0; tid < l->nthreads; tid++) {
    if (l->k->reduce)
      l->k->reduce(l->a, l->b, count, l->abort, tid, l->nthreads);
    else if (l->k->divide)
      l->k->divide(l->a, count, l->n, tid, l->nthreads);
    else
      l->k->multi(&l->m, tid, l->nthreads);
  }
  pthread_mutex_lock(&mu);
}

/* runner runs launches whose start event has completed, and frees those whose stream
 * has moved past their end wait. */
static void* runner(void* arg) {
  (void)arg;
  pthread_mutex_lock(&mu);
  for (;;) {
    launch* ready = NULL;
    for (launch** pp = &g_launches; *pp;) {
      launch* l = *pp;
      if (l->ran && l->s->done >= l->ticket) {
        *pp = l->next;
        free(l);
        continue;
      }
      if (ready == NULL && !l->ran && l->start.completed >= 1) ready = l;
      pp = &l->next;
    }
    if (ready == NULL) {
      pthread_cond_wait(&cv, &mu);
      continue;
    }
    execute(ready);
    ready->ran = 1;
    ready->end.completed = 1;
    pthread_cond_broadcast(&cv);
  }
  return NULL;
}

/* ---- driver entry points ---- */

/* module_gone: m was unloaded, or died with its context (a primary context reset and
 * retained again has the same handle, but none of its modules). mu held. */
static int module_gone(const fakeModule* m) { return m->unloaded || m->gen != m->ctx->gen; }

CUresult cuModuleLoadData(void** module, const void* image) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  if (module == NULL || image == NULL) return CUDA_ERROR_INVALID_VALUE;
  const char* fail = getenv("FAKECUDA_MODULE_ERROR"); /* a CUresult, as a driver too old would give */
  if (fail && *fail) return (CUresult)strtol(fail, NULL, 10);
  /* Header: u32 magic, u16 version, u16 header size, u64 size of what follows. */
  uint32_t magic;
  uint16_t header;
  uint64_t body;
  memcpy(&magic, image, 4);
  memcpy(&header, (const char*)image + 6, 2);
  memcpy(&body, (const char*)image + 8, 8);
  if (magic != FATBIN_MAGIC || header < 16 || body > (1ull << 30)) return CUDA_ERROR_INVALID_IMAGE;
  fakeModule* m = calloc(1, sizeof *m);
  m->size = header + body;
  m->image = malloc(m->size);
  memcpy(m->image, image, m->size);
  m->ctx = t_current;
  pthread_mutex_lock(&mu);
  m->gen = t_current->gen;
  m->next = g_modules;
  g_modules = m;
  pthread_mutex_unlock(&mu);
  *module = m;
  return CUDA_SUCCESS;
}

CUresult cuModuleUnload(void* module) {
  CALLED();
  pthread_mutex_lock(&mu);
  fakeModule* m = module;
  CUresult r = CUDA_SUCCESS;
  if (!is_module(m) || m->unloaded) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else {
    m->unloaded = 1;
    free(m->image);
    m->image = NULL;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuModuleGetFunction(void** function, void* module, const char* name) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  if (function == NULL || name == NULL) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  fakeModule* m = module;
  const hostKernel* k = host_kernel(name);
  if (!is_module(m) || module_gone(m)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if (k == NULL || memmem(m->image, m->size, name, strlen(name) + 1) == NULL) {
    r = CUDA_ERROR_NOT_FOUND; /* the name must be a kernel of the image, NUL included */
  } else {
    fakeFunction* f = calloc(1, sizeof *f);
    f->m = m;
    f->k = k;
    const char* mode = getenv("CUDA_MODULE_LOADING"); /* the driver's default is LAZY */
    f->loaded = mode != NULL && strcmp(mode, "EAGER") == 0;
    f->next = g_functions;
    g_functions = f;
    *function = f;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

/* cuFuncLoad loads a function now (CUDA 12.4), so that its first launch does not. */
CUresult cuFuncLoad(void* function) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  pthread_mutex_lock(&mu);
  fakeFunction* f = function;
  if (!is_function(f) || module_gone(f->m)) {
    r = CUDA_ERROR_INVALID_HANDLE;
  } else if (!f->loaded) {
    pthread_mutex_unlock(&mu);
    drain_ctx("cuFuncLoad");
    pthread_mutex_lock(&mu);
    f->loaded = 1;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* stream, void** params, void** extra) {
  CALLED();
  (void)shared;
  unsigned long long blocks = (unsigned long long)gx * gy * gz, threads = (unsigned long long)bx * by * bz;
  if (blocks == 0 || threads == 0 || threads > 1024 || params == NULL || extra != NULL)
    return CUDA_ERROR_INVALID_VALUE;
  /* A lazily loaded kernel is loaded at its first launch, which waits for the
   * context's work as an allocation does (drain.c). */
  pthread_mutex_lock(&mu);
  int lazy = is_function(function) && !((fakeFunction*)function)->loaded;
  if (lazy) {
    ((fakeFunction*)function)->loaded = 1;
    g_strict.lazy_loads++;
  }
  pthread_mutex_unlock(&mu);
  if (lazy && t_current != NULL) drain_ctx("the first launch of a lazily loaded kernel (cuLaunchKernel)");
  pthread_mutex_lock(&mu);
  fakeFunction* f = function;
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS) r = stream_ctx_ok(s);
  if (r == CUDA_SUCCESS && (!is_function(f) || module_gone(f->m) || f->m->ctx != s->ctx))
    r = CUDA_ERROR_INVALID_HANDLE;
  if (r != CUDA_SUCCESS) {
    pthread_mutex_unlock(&mu);
    return r;
  }
  if (s->capturing) { /* recorded into the graph, never run here */
    g_count.captured_ops++;
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
  }
  launch* l = calloc(1, sizeof *l);
  l->k = f->k;
  l->nthreads = blocks * threads;
  if (l->k->multi) {
    memcpy(&l->m, params[0], sizeof l->m);
    l->count = l->m.count;
  } else if (l->k->reduce) {
    l->a = *(void**)params[0];
    l->b = *(void**)params[1];
    l->count = *(unsigned long long*)params[2];
    l->abort = *(const unsigned**)params[3];
  } else {
    l->a = *(void**)params[0];
    l->count = *(unsigned long long*)params[1];
    l->n = *(long long*)params[2];
  }
  l->corrupt = g_corrupt != NULL && strcmp(g_corrupt, l->k->name) == 0;
  l->start.ctx = l->end.ctx = s->ctx;
  l->s = s;
  op* rec = calloc(1, sizeof *rec);
  rec->kind = OP_RECORD;
  rec->ev = &l->start;
  rec->gen = 1;
  push(s, rec);
  op* wait = calloc(1, sizeof *wait);
  wait->kind = OP_WAIT;
  wait->ev = &l->end;
  wait->gen = 1;
  push(s, wait);
  l->ticket = s->pushed;
  l->next = g_launches;
  g_launches = l;
  if (!g_runner) {
    pthread_t t;
    pthread_create(&t, NULL, runner, NULL);
    pthread_detach(t);
    g_runner = 1;
  }
  pthread_cond_broadcast(&cv);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* ---- test hooks ---- */

int fakecudaCorruptKernel(const char* name) {
  pthread_mutex_lock(&mu);
  free(g_corrupt);
  g_corrupt = name ? strdup(name) : NULL;
  int known = name == NULL || host_kernel(name) != NULL;
  pthread_mutex_unlock(&mu);
  return known ? 0 : -1;
}
