/*
 * vmm.c: the fake CUDA driver's virtual memory management (see fakecuda_internal.h):
 * physical allocations that outlive the process that made them, as cuMemCreate's do
 * when exported as POSIX file descriptors.
 *
 * - cuMemCreate makes a memfd (named after the physical GPU, so an importer learns it
 *   from the descriptor alone) of a size that must be a multiple of the granularity
 *   (cuMemGetAllocationGranularity: 2 MiB, as on the GPUs gonccl runs on), poisoned;
 *   the handle is reference counted: cuMemRelease drops the handle's own reference,
 *   every cuMemMap holds one until cuMemUnmap, and the memfd is closed only when both
 *   are gone;
 * - cuMemExportToShareableHandle gives a new descriptor (a dup of the memfd) that the
 *   caller owns and can pass to any process (SCM_RIGHTS); only for an allocation made
 *   with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR requested;
 *   cuMemImportFromShareableHandle makes a new handle of the same memory from such a
 *   descriptor (the caller keeps its own). The kernel frees the memfd once no process
 *   has it open or mapped: memory a dead process made stays valid for whoever still
 *   maps it (unlike cuIpcOpenMemHandle's, deadpeer.c);
 * - cuMemAddressReserve reserves addresses (PROT_NONE), cuMemMap maps a handle's memory
 *   there, still inaccessible: only cuMemSetAccess makes it device memory that stream
 *   operations may touch (a host access or a queued copy before that faults), as an
 *   access to mapped memory without access rights faults on a GPU (each device has its
 *   own rights: a kernel of a device not given access faults, module.c); cuMemUnmap takes the
 *   mapping back (the range must be a whole mapping), cuMemAddressFree the addresses
 *   (nothing may be mapped in them any more);
 * - sizes, offsets and addresses must be multiples of the granularity;
 * - cuDeviceGetAttribute answers CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
 *   (0 with FAKECUDA_NO_VMM set) and _HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (0
 *   with FAKECUDA_NO_VMM or FAKECUDA_NO_POSIX_FD set), and
 *   CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED for pool.c.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"
#include "strict.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRANULARITY ((size_t)2 << 20)
#define VMM_MAGIC 0x5e4d4d56u
#define FD_NAME "fakecuda-vmm-gpu"

enum { ATTR_MEMPOOLS = 115, ATTR_VMM = 102, ATTR_POSIX_FD = 103, HANDLE_POSIX_FD = 1, TYPE_PINNED = 1, LOC_DEVICE = 1 };

typedef struct {
  int type;
  int requestedHandleTypes;
  struct {
    int type;
    int id;
  } location;
  void* win32HandleMetaData;
  unsigned char allocFlags[8];
} memProp;

typedef struct {
  struct {
    int type;
    int id;
  } location;
  int flags;
} accessDesc;

typedef struct vmem {
  unsigned magic;
  int fd;
  size_t size;
  int phys;       /* the physical GPU the memory is on */
  int exportable; /* made with the POSIX fd handle type requested */
  int imported;   /* made by cuMemImportFromShareableHandle */
  int released;   /* cuMemRelease was called */
  int maps;       /* cuMemMap mappings not unmapped */
  int maker;      /* the pid of the process that made it (its memfd's name says) */
} vmem;

typedef struct vrange {
  char* p;
  size_t n;
  vmem* m;    /* a mapping: its memory; NULL: a reservation */
  alloc* a;   /* a mapping: its entry in memory.c's table, once cuMemSetAccess gave access */
  struct vrange* next;
} vrange;

static vrange* g_ranges; /* guarded by mu */

static int no_vmm(void) { return getenv("FAKECUDA_NO_VMM") != NULL; }

CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (v == NULL) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || dev >= NDEV) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  switch (attr) {
    case ATTR_VMM: *v = !no_vmm(); return CUDA_SUCCESS;
    case ATTR_POSIX_FD: *v = !no_vmm() && getenv("FAKECUDA_NO_POSIX_FD") == NULL; return CUDA_SUCCESS;
    case ATTR_MEMPOOLS: *v = pools_supported(); return CUDA_SUCCESS; /* pool.c */
  }
  return CUDA_ERROR_INVALID_VALUE; /* an attribute the fake does not model */
}

static CUresult check_prop(const memProp* p) {
  if (p == NULL || p->type != TYPE_PINNED || p->location.type != LOC_DEVICE || p->location.id < 0 ||
      p->location.id >= NDEV || (p->requestedHandleTypes & ~HANDLE_POSIX_FD) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t* g, const memProp* p, int option) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (g == NULL || (option != 0 && option != 1) || check_prop(p)) return CUDA_ERROR_INVALID_VALUE;
  if (no_vmm()) return 801; /* CUDA_ERROR_NOT_SUPPORTED */
  *g = GRANULARITY;
  return CUDA_SUCCESS;
}

static vmem* handle_of(unsigned long long h) {
  vmem* m = (vmem*)(uintptr_t)h;
  return m != NULL && m->magic == VMM_MAGIC ? m : NULL;
}

/* vmem_put drops a reference: the memfd goes once released and unmapped. mu held. */
static void vmem_put(vmem* m) {
  if (!m->released || m->maps > 0) return;
  close(m->fd);
  if (m->imported) g_strict.ipc_closes++; /* as cuIpcCloseMemHandle's last close */
  else g_strict.dev_frees++;
  m->magic = 0; /* kept, so a later use of the handle is recognized */
}

CUresult cuMemCreate(unsigned long long* h, size_t size, const memProp* p, unsigned long long flags) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (h == NULL || size == 0 || size % GRANULARITY != 0 || flags != 0 || check_prop(p)) return CUDA_ERROR_INVALID_VALUE;
  if (no_vmm()) return 801;
  char name[64];
  int phys = physical(p->location.id);
  snprintf(name, sizeof name, FD_NAME "%d-pid%d", phys, (int)getpid());
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)size) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  char* tmp = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (tmp == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memset(tmp, POISON, size); /* as uninitialized device memory: never zero by luck */
  munmap(tmp, size);
  vmem* m = calloc(1, sizeof *m);
  *m = (vmem){VMM_MAGIC, fd, size, phys, (p->requestedHandleTypes & HANDLE_POSIX_FD) != 0, 0, 0, 0, getpid()};
  pthread_mutex_lock(&mu);
  g_strict.dev_allocs++;
  pthread_mutex_unlock(&mu);
  *h = (unsigned long long)(uintptr_t)m;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(unsigned long long h) {
  CALLED();
  pthread_mutex_lock(&mu);
  vmem* m = handle_of(h);
  if (m == NULL || m->released) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  m->released = 1;
  vmem_put(m);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* out, unsigned long long h, int type, unsigned long long flags) {
  CALLED();
  if (out == NULL || type != HANDLE_POSIX_FD || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  vmem* m = handle_of(h);
  CUresult r = CUDA_SUCCESS;
  if (m == NULL || m->released) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else if (!m->exportable) {
    r = 800; /* CUDA_ERROR_NOT_PERMITTED: not created with this handle type requested */
  } else {
    int fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) r = CUDA_ERROR_OUT_OF_MEMORY;
    else {
      *(int*)out = fd;
      g_strict.ipc_exports++;
    }
  }
  pthread_mutex_unlock(&mu);
  return r;
}

/* fd_phys returns the physical GPU of a descriptor cuMemExportToShareableHandle gave
 * (its memfd's name says), and sets *maker to the pid of the process that made it, or
 * returns -1 for any other file. */
static int fd_phys(int fd, int* maker) {
  char path[64], target[256];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return -1;
  target[n] = 0;
  const char* want = "/memfd:" FD_NAME;
  if (strncmp(target, want, strlen(want)) != 0) return -1;
  const char* pid = strstr(target + strlen(want), "-pid");
  *maker = pid != NULL ? atoi(pid + 4) : 0;
  return atoi(target + strlen(want));
}

CUresult cuMemImportFromShareableHandle(unsigned long long* h, void* os, int type) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (h == NULL || type != HANDLE_POSIX_FD) return CUDA_ERROR_INVALID_VALUE;
  int fd = (int)(intptr_t)os;
  int maker = 0;
  int phys = fd_phys(fd, &maker);
  struct stat st;
  if (phys < 0 || fstat(fd, &st) != 0 || st.st_size <= 0 || (size_t)st.st_size % GRANULARITY != 0)
    return CUDA_ERROR_INVALID_VALUE; /* not a descriptor of exported device memory */
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  vmem* m = calloc(1, sizeof *m);
  *m = (vmem){VMM_MAGIC, own, (size_t)st.st_size, phys, 1, 1, 0, 0, maker};
  pthread_mutex_lock(&mu);
  g_strict.ipc_opens++;
  pthread_mutex_unlock(&mu);
  *h = (unsigned long long)(uintptr_t)m;
  return CUDA_SUCCESS;
}

static vrange* find_range(const char* p, int mapping) {
  for (vrange* r = g_ranges; r; r = r->next)
    if ((r->m != NULL) == mapping && p >= r->p && p < r->p + r->n) return r;
  return NULL;
}

static void drop_range(vrange* x) {
  for (vrange** pr = &g_ranges; *pr; pr = &(*pr)->next) {
    if (*pr == x) {
      *pr = x->next;
      free(x);
      return;
    }
  }
}

CUresult cuMemAddressReserve(CUdeviceptr* out, size_t size, size_t align, CUdeviceptr addr, unsigned long long flags) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  (void)addr; /* a hint only */
  if (out == NULL || size == 0 || size % GRANULARITY != 0 || flags != 0 || (align & (align - 1)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  size_t a = align > GRANULARITY ? align : GRANULARITY;
  char* raw = mmap(NULL, size + a, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  char* p = (char*)(((uintptr_t)raw + a - 1) & ~(uintptr_t)(a - 1));
  if (p > raw) munmap(raw, (size_t)(p - raw));
  if (raw + size + a > p + size) munmap(p + size, (size_t)(raw + size + a - (p + size)));
  vrange* r = calloc(1, sizeof *r);
  r->p = p;
  r->n = size;
  pthread_mutex_lock(&mu);
  r->next = g_ranges;
  g_ranges = r;
  pthread_mutex_unlock(&mu);
  *out = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  CALLED();
  char* p = (char*)(uintptr_t)ptr;
  pthread_mutex_lock(&mu);
  vrange* r = find_range(p, 0);
  CUresult res = CUDA_SUCCESS;
  if (r == NULL || r->p != p || r->n != size) {
    res = CUDA_ERROR_INVALID_VALUE;
  } else {
    for (vrange* m = g_ranges; m; m = m->next)
      if (m->m != NULL && m->p < p + size && p < m->p + m->n) res = CUDA_ERROR_INVALID_VALUE; /* still mapped */
    if (res == CUDA_SUCCESS) {
      munmap(p, size);
      drop_range(r);
    }
  }
  pthread_mutex_unlock(&mu);
  return res;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, unsigned long long h, unsigned long long flags) {
  CALLED();
  char* p = (char*)(uintptr_t)ptr;
  if (size == 0 || flags != 0 || ptr % GRANULARITY != 0 || size % GRANULARITY != 0 || offset % GRANULARITY != 0)
    return CUDA_ERROR_INVALID_VALUE;
  pthread_mutex_lock(&mu);
  vmem* m = handle_of(h);
  vrange* res = find_range(p, 0);
  CUresult r = CUDA_SUCCESS;
  if (m == NULL || m->released || offset + size > m->size || res == NULL || p + size > res->p + res->n) {
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    for (vrange* o = g_ranges; o; o = o->next)
      if (o->m != NULL && o->p < p + size && p < o->p + o->n) r = CUDA_ERROR_INVALID_VALUE; /* mapped already */
  }
  if (r == CUDA_SUCCESS &&
      mmap(p, size, PROT_NONE, MAP_SHARED | MAP_FIXED, m->fd, (off_t)offset) == MAP_FAILED)
    r = CUDA_ERROR_OUT_OF_MEMORY;
  if (r == CUDA_SUCCESS) {
    vrange* x = calloc(1, sizeof *x);
    x->p = p;
    x->n = size;
    x->m = m;
    x->next = g_ranges;
    g_ranges = x;
    m->maps++;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const accessDesc* desc, size_t count) {
  CALLED();
  char* p = (char*)(uintptr_t)ptr;
  if (desc == NULL || count == 0 || ptr % GRANULARITY != 0 || size % GRANULARITY != 0) return CUDA_ERROR_INVALID_VALUE;
  int rw = -1, dev = -1;
  for (size_t i = 0; i < count; i++) {
    if (desc[i].location.type != LOC_DEVICE || desc[i].location.id < 0 || desc[i].location.id >= NDEV ||
        (desc[i].flags != 0 && desc[i].flags != 1 && desc[i].flags != 3))
      return CUDA_ERROR_INVALID_VALUE;
    rw = desc[i].flags; /* the fake keeps one device's access: the last named */
    dev = desc[i].location.id;
  }
  pthread_mutex_lock(&mu);
  CUresult r = CUDA_SUCCESS;
  /* The whole range must be mapped, and memory of another GPU needs peer access. */
  for (char* q = p; q < p + size && r == CUDA_SUCCESS;) {
    vrange* x = find_range(q, 1);
    if (x == NULL) r = CUDA_ERROR_INVALID_VALUE;
    else if (rw != 0 && !peer_ok(physical(dev), x->m->phys)) r = 101; /* CUDA_ERROR_INVALID_DEVICE */
    else q = x->p + x->n;
  }
  for (char* q = p; q < p + size && r == CUDA_SUCCESS;) {
    vrange* x = find_range(q, 1);
    mprotect(x->p, x->n, rw == 3 ? PROT_READ | PROT_WRITE : rw == 1 ? PROT_READ : PROT_NONE);
    alloc* a = x->a;
    if (rw != 0 && a == NULL) {
      int home = ordinal_of(x->m->phys); /* the GPU the memory is on, as this process numbers it */
      a = x->a = track(x->p, x->n, home >= 0 ? home : dev);
      a->vmm = 1;
      if (x->m->imported && x->m->maker != getpid()) a->maker = x->m->maker;
    }
    if (a != NULL) {
      if (rw != 0) a->access |= 1u << dev;
      else a->access &= ~(1u << dev);
      a->live = a->access != 0;
    }
    q = x->p + x->n;
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  CALLED();
  char* p = (char*)(uintptr_t)ptr;
  pthread_mutex_lock(&mu);
  vrange* x = find_range(p, 1);
  CUresult r = CUDA_SUCCESS;
  if (x == NULL || x->p != p || x->n != size) { /* as the driver: whole mappings only */
    r = CUDA_ERROR_INVALID_VALUE;
  } else {
    if (x->a != NULL) x->a->live = 0; /* queued work that reaches it counts bad_access */
    /* Back to a bare reservation: a later touch faults. */
    mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    vmem* m = x->m;
    drop_range(x);
    m->maps--;
    vmem_put(m);
  }
  pthread_mutex_unlock(&mu);
  return r;
}
