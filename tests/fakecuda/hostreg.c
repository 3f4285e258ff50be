/*
 * hostreg.c: the fake CUDA driver's registered host memory (see fakecuda_internal.h):
 * cuMemHostRegister page-locks a host range and maps it for the device, and
 * cuMemHostGetDevicePointer gives its device address, which stream memory operations
 * and device copies then take like device memory. In the fake the device address is
 * the host address (host memory plays device memory). A range registered twice, or
 * unregistered when it was not, is CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED /
 * _NOT_REGISTERED, as on the real driver; after cuMemHostUnregister the stream
 * operations that reach it count bad_access. Both calls wait for all work of the
 * context first (drain.c), as the driver's do: a register or unregister while a stream
 * of the process waits on a flag deadlocks on a GPU, and faults here.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"
#include "strict.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

enum {
  CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
  CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
};

typedef struct reg {
  char* p;
  size_t n;
  unsigned flags; /* CU_MEMHOSTREGISTER_*: only DEVICEMAP (0x2) ranges have a device address */
  struct reg* next;
} reg;

static reg* g_regs; /* guarded by mu */

static reg* find_reg(const void* p, size_t n) {
  for (reg* r = g_regs; r; r = r->next)
    if ((const char*)p >= r->p && (const char*)p + n <= r->p + r->n) return r;
  return NULL;
}

/* hostreg_live reports whether [p, p+n) lies in one registered host range that has a
 * device address (registered with CU_MEMHOSTREGISTER_DEVICEMAP): stream memory
 * operations and device copies take only device pointers. mu held. */
int hostreg_live(const void* p, size_t n) {
  const reg* r = find_reg(p, n);
  return r != NULL && (r->flags & 0x2) != 0;
}

CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned int flags) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  /* PORTABLE 0x1, DEVICEMAP 0x2, IOMEMORY 0x4, READ_ONLY 0x8: anything else is refused. */
  if ((flags & ~0xfu) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (p == NULL || n == 0 || ((uintptr_t)p % (uintptr_t)sysconf(_SC_PAGESIZE)) != 0) return CUDA_ERROR_INVALID_VALUE;
  drain_ctx("cuMemHostRegister");
  pthread_mutex_lock(&mu);
  for (reg* g = g_regs; g; g = g->next) {
    if ((char*)p < g->p + g->n && (char*)p + n > g->p) {
      pthread_mutex_unlock(&mu);
      return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    }
  }
  reg* g = calloc(1, sizeof *g);
  g->p = p;
  g->n = n;
  g->flags = flags;
  g->next = g_regs;
  g_regs = g;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  drain_ctx("cuMemHostUnregister");
  pthread_mutex_lock(&mu);
  for (reg** g = &g_regs; *g; g = &(*g)->next) {
    if ((*g)->p == p) {
      reg* dead = *g;
      *g = dead->next;
      free(dead);
      pthread_mutex_unlock(&mu);
      return CUDA_SUCCESS;
    }
  }
  pthread_mutex_unlock(&mu);
  return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* out, void* p, unsigned int flags) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  if (out == NULL || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  const reg* g = find_reg(p, 1);
  /* Registered without CU_MEMHOSTREGISTER_DEVICEMAP: no device address for it. */
  int ok = g != NULL && (g->flags & 0x2) != 0;
  pthread_mutex_unlock(&mu);
  if (!ok) return CUDA_ERROR_INVALID_VALUE;
  *out = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}
