/*
 * pool.c: the fake CUDA driver's stream-ordered memory (see fakecuda_internal.h), the
 * memory of cudaMallocAsync, which PyTorch allocates with
 * PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync. As the driver's "Stream Ordered
 * Memory Allocator" section documents it:
 *
 * - cuMemAllocAsync allocates from the current pool of the stream's device (its default
 *   pool: the fake has no cuDeviceSetMemPool or cuMemPoolCreate), cuMemAllocFromPoolAsync
 *   from the pool named; neither waits for the context's work (unlike cuMemAlloc: drain.c);
 * - cuMemFreeAsync frees in stream order: the memory stays valid until the free reaches
 *   its place in the stream, and a queued operation of any stream that reaches it after
 *   that counts bad_access ("use after free ... undefined behavior"); the pool may hand
 *   the same addresses out again at the next allocation of that size, as a pool does,
 *   with a new CU_POINTER_ATTRIBUTE_BUFFER_ID;
 * - pool memory is not cuMemAlloc memory: cuIpcGetMemHandle refuses it
 *   (CUDA_ERROR_INVALID_VALUE; that call takes "the base of an existing device memory
 *   allocation created with cuMemAlloc"), cuPointerGetAttribute answers
 *   CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE 0 and
 *   CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE the pool (memory.c); the range attributes
 *   give the allocation itself;
 * - cuDeviceGetAttribute answers CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED (vmm.c)
 *   1, 0 with FAKECUDA_NO_MEMPOOLS set, where the allocations are refused
 *   (CUDA_ERROR_NOT_SUPPORTED), as on a device without them.
 *
 * Pools are not exportable here (no cuMemPoolExportToShareableHandle): gonccl never
 * maps a peer's pool memory.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"
#include "strict.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAGIC 0x9001f00du
#define POOL_GUARD 4096 /* untracked bytes after each block, as memory.c's ALLOC_GUARD */

typedef struct block {
  char* p;
  size_t n;
  alloc* a;  /* its entry in memory.c's table while allocated; NULL: free for reuse */
  struct block* next;
} block;

typedef struct fakePool {
  unsigned magic;
  int dev;
  block* blocks; /* every block it ever made; kept, so addresses are reused, never unmapped */
} fakePool;

static fakePool g_default[NDEV];

static fakePool* default_pool(int dev) {
  fakePool* p = &g_default[dev];
  p->magic = POOL_MAGIC;
  p->dev = dev;
  return p;
}

static fakePool* pool_of(void* h) {
  fakePool* p = h;
  return p != NULL && p->magic == POOL_MAGIC ? p : NULL;
}

int pools_supported(void) { return getenv("FAKECUDA_NO_MEMPOOLS") == NULL; }

/* alloc_from hands out n bytes of pool: a free block of that size if there is one
 * (its addresses again, as a pool reuses them), or a new one. mu held. */
static char* alloc_from(fakePool* pool, size_t n) {
  block* b = NULL;
  for (block* x = pool->blocks; x; x = x->next)
    if (x->a == NULL && x->n == n) b = x;
  if (b == NULL) {
    b = calloc(1, sizeof *b);
    b->p = malloc(n + POOL_GUARD);
    b->n = n;
    b->next = pool->blocks;
    pool->blocks = b;
  }
  memset(b->p, POISON, n);
  b->a = track(b->p, n, pool->dev);
  b->a->pool = pool;
  return b->p;
}

static CUresult alloc_async(CUdeviceptr* out, size_t n, fakePool* pool, void* stream) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (out == NULL || n == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!pools_supported()) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  if (r == CUDA_SUCCESS && pool == NULL) pool = default_pool(s->ctx->dev); /* the stream's device's */
  if (r == CUDA_SUCCESS) {
    g_strict.dev_allocs++;
    *out = (CUdeviceptr)(uintptr_t)alloc_from(pool, n);
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuMemAllocAsync(CUdeviceptr* out, size_t n, void* stream) {
  CALLED();
  return alloc_async(out, n, NULL, stream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* out, size_t n, void* pool, void* stream) {
  CALLED();
  fakePool* p = pool_of(pool);
  if (p == NULL) return CUDA_ERROR_INVALID_VALUE;
  return alloc_async(out, n, p, stream);
}

/* run_free: the free reaches its place in the stream; arg[0] is the block. mu held. */
static void run_free(op* o) {
  block* b = (block*)(uintptr_t)o->arg[0];
  b->a->live = 0;
  memset(b->p, POISON, b->n);
  b->a = NULL; /* free for reuse */
}

CUresult cuMemFreeAsync(CUdeviceptr ptr, void* stream) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  char* p = (char*)(uintptr_t)ptr;
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = resolve(stream, &s);
  alloc* a = r == CUDA_SUCCESS ? find(p, 1, 1) : NULL;
  block* b = NULL;
  if (a != NULL && a->live && a->p == p && a->pool != NULL && !a->freeing) {
    for (block* x = ((fakePool*)a->pool)->blocks; x; x = x->next)
      if (x->a == a) b = x;
  }
  /* Not the base of live pool memory, or its free is queued already. */
  if (r == CUDA_SUCCESS && b == NULL) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    a->freeing = !s->capturing; /* captured into a graph, the free never runs here */
    g_strict.dev_frees++;
    op* o = calloc(1, sizeof *o);
    o->kind = OP_CALL;
    o->call = run_free;
    o->arg[0] = (unsigned long)(uintptr_t)b;
    push(s, o);
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuDeviceGetDefaultMemPool(void** pool, int dev) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= NDEV) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  if (!pools_supported()) return 801;
  pthread_mutex_lock(&mu);
  *pool = default_pool(dev);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(void** pool, int dev) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (pool == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= NDEV) return 101;
  if (!pools_supported()) return 801;
  pthread_mutex_lock(&mu);
  *pool = default_pool(dev); /* the fake has no cuDeviceSetMemPool: always the default */
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
