/*
 * ipc.c: the fake CUDA driver's device memory that several processes can share (see
 * fakecuda_internal.h), as CUDA IPC lets ranks of one host share device buffers:
 *
 * - cuMemAlloc: "device memory" is a memfd mapped MAP_SHARED, entered in memory.c's
 *   table (so pointer attributes and the staging copies know it); cuMemFree poisons
 *   it (0xDB, which peers that still map it see) and replaces the mapping with an
 *   inaccessible one, so a later touch from the host faults;
 * - cuIpcGetMemHandle names an allocation (pid, fd, size, serial); cuIpcOpenMemHandle
 *   maps it in another process through /proc/<pid>/fd/<fd> (refused in the exporting
 *   process, as the real driver refuses it), or, for a handle the context has open
 *   already, returns the same pointer with its reference count raised, as the driver
 *   does; cuIpcCloseMemHandle waits for all work of the context (drain.c), as the
 *   driver's does, and the last close unmaps it as cuMemFree does, so a use after
 *   close faults, and queued operations that reach it count bad_access;
 * - cuMemcpyDtoDAsync: a copy between device ranges (either may be a peer's mapping),
 *   checked when queued and when it runs;
 * - cuStreamWaitValue32 / cuStreamWriteValue32: stream memory operations on 32-bit
 *   flags in device memory, run in stream order by the stream's thread; a wait holds
 *   only its own stream, polling the shared memory (a peer process writes it). Their
 *   pointers are device pointers (the driver's "Stream Memory Operations": registered
 *   host memory by the address cuMemHostGetDevicePointer gives, so only memory
 *   registered with CU_MEMHOSTREGISTER_DEVICEMAP; anything else is refused when queued),
 *   and the GPU itself reads or writes them: memory of a device the stream's may not
 *   access faults when the operation runs, as a kernel's does (module.c);
 * - copies (cuMemcpyDtoDAsync and the host copies of memory.c) between devices need no
 *   peer access: with unified addressing the driver copies between any two devices'
 *   memory ("Peer-to-Peer Memory Copy" in the programming guide; without peer access it
 *   stages them through the host);
 * - cuDeviceCanAccessPeer: every pair of distinct fake GPUs can, unless FAKECUDA_NO_PEER
 *   is set (none can) or FAKECUDA_PEER_GROUPS lists the groups of physical GPUs that can
 *   ("0,1;2,3": 0 and 1 can, 2 and 3 can, no other pair), as on a machine of two NVLink
 *   islands; cuIpcOpenMemHandle and cuMemSetAccess (vmm.c) refuse memory of a GPU the
 *   caller's cannot access;
 * - cuIpcOpenMemHandle takes only CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as its flags, as
 *   the driver documents; the driver also documents that a process may open the handles
 *   of one exporting device in one context per device, which the fake cannot break (its
 *   only contexts are the primary ones), but a primary context that is reset is a new
 *   context: the mappings opened in the old one go with it (a later use faults, queued
 *   work that reaches them counts bad_access), and opening the handle again maps it
 *   anew.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"
#include "strict.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { CUDA_ERROR_INVALID_DEVICE = 101 };

/* The 64 bytes of a CUipcMemHandle, as this fake fills them. */
typedef struct {
  unsigned magic;
  int pid;
  int fd;
  int dev;
  unsigned long long size;
  unsigned long long serial; /* the allocation, among the exporter's */
  char pad[32];
} ipcHandle;

_Static_assert(sizeof(ipcHandle) == 64, "CUipcMemHandle is 64 bytes");

#define IPC_MAGIC 0xfa4ec0daU

/* One shared allocation of this process: made here (fd >= 0) or opened from a peer. */
typedef struct shared {
  char* p;
  size_t n;
  int fd;       /* the memfd of an allocation made here; -1 for an opened one */
  int imported; /* opened with cuIpcOpenMemHandle */
  int live;
  unsigned* ctl; /* the mapper table after the allocation (deadpeer.c) */
  unsigned long long serial; /* made here: its number; opened: the exporter's */
  int src_pid;               /* opened: the exporter */
  fakeCtx* ctx;              /* opened: the context that opened it */
  int refs;                  /* opened: cuIpcOpenMemHandle calls not yet closed */
  struct shared* next;
} shared;

static unsigned long long g_serial; /* guarded by mu */

static shared* g_shared; /* guarded by mu */

static shared* find_shared(const void* p) {
  for (shared* s = g_shared; s; s = s->next)
    if (s->p == p) return s;
  return NULL;
}

int ipc_exportable(const void* base) {
  shared* s = find_shared(base);
  return s != NULL && !s->imported && s->live;
}

/* retire makes [p, p+n) inaccessible while keeping the addresses reserved, so a stray
 * host access faults instead of reaching whatever the address would be reused for. */
static void retire(char* p, size_t n) {
  munmap(p, n);
  mmap(p, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

static void mark_dead(const char* p) {
  alloc* a = find(p, 1, 1);
  if (a != NULL && a->p == p) a->live = 0;
}

void ipc_forget(const fakeCtx* ctx) {
  for (shared* s = g_shared; s; s = s->next) {
    if (!s->imported || !s->live || s->ctx != ctx) continue;
    s->live = 0;
    s->refs = 0;
    mapping_closed(s->p);
    mark_dead(s->p);
    retire(s->p, s->n);
  }
}

/* live_dev reports whether [p, p+n) lies in one live device allocation, or in host
 * memory registered for the device (hostreg.c). mu held. */
static int live_dev(const void* p, size_t n) {
  alloc* a = find(p, n, 1);
  return (a != NULL && a->live) || hostreg_live(p, n);
}

static CUresult stream_for(void* stream, fakeStream** s) {
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = resolve(stream, s);
  if (r) return r;
  return stream_ctx_ok(*s);
}

/* ---- allocation and IPC handles ---- */

CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t n) {
  CALLED();
  CUresult r = need_ctx();
  if (r || (r = capture_unsafe("cuMemAlloc"))) return r;
  if (out == NULL || n == 0) return CUDA_ERROR_INVALID_VALUE;
  drain_ctx("cuMemAlloc");
  size_t size = (n + 4095) & ~(size_t)4095;
  int fd = memfd_create("fakecuda-device-memory", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, (off_t)size + 4096) != 0) { /* + the mapper table (deadpeer.c) */
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  char* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  memset(p, POISON, size);
  shared* s = calloc(1, sizeof *s);
  s->p = p;
  s->n = size;
  s->fd = fd;
  s->live = 1;
  s->ctl = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)size);
  pthread_mutex_lock(&mu);
  g_strict.dev_allocs++;
  s->serial = ++g_serial;
  track(p, n, t_current->dev);
  s->next = g_shared;
  g_shared = s;
  pthread_mutex_unlock(&mu);
  *out = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  CALLED();
  CUresult r = need_ctx();
  if (r || (r = capture_unsafe("cuMemFree"))) return r;
  char* p = (char*)(uintptr_t)ptr;
  drain_ctx("cuMemFree");
  pthread_mutex_lock(&mu);
  shared* s = find_shared(p);
  if (s == NULL) {
    /* Not from cuMemAlloc: memory of fakecudaMalloc (realcuda.c's managed allocations,
     * when the fake stands in for libcuda.so.1 under it) is freed as fakecudaFree does. */
    pthread_mutex_unlock(&mu);
    return fakecudaFree(p) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  if (s->imported || !s->live) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  g_strict.dev_frees++;
  if (s->ctl != MAP_FAILED) check_no_mappers(s->ctl, p);
  /* Poisoned for every process that still maps it, then unreachable from here. */
  memset(p, POISON, s->n);
  s->live = 0;
  mark_dead(p);
  close(s->fd);
  s->fd = -1;
  retire(p, s->n);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

/* fakecudaFreeExported frees cuMemAlloc memory as cuMemFree does, but while other
 * processes still map it, as PyTorch's caching allocator frees a segment (cudaFree,
 * torch.cuda.empty_cache) whatever a peer mapped: no fault here; the mapper table
 * records the free, and a stream of an importer that then reads or writes the mapping
 * faults (deadpeer.c). Returns 0, or -1 if p is not the base of live cuMemAlloc
 * memory. */
int fakecudaFreeExported(void* p) {
  pthread_mutex_lock(&mu);
  shared* s = find_shared(p);
  if (s == NULL || s->imported || !s->live) {
    pthread_mutex_unlock(&mu);
    return -1;
  }
  g_strict.dev_frees++;
  if (s->ctl != MAP_FAILED) mark_freed(s->ctl);
  memset(p, POISON, s->n);
  s->live = 0;
  mark_dead(p);
  close(s->fd);
  s->fd = -1;
  retire(p, s->n);
  pthread_mutex_unlock(&mu);
  return 0;
}

CUresult cuIpcGetMemHandle(void* handle, CUdeviceptr ptr) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  pthread_mutex_lock(&mu);
  shared* s = find_shared((void*)(uintptr_t)ptr);
  alloc* a = find((void*)(uintptr_t)ptr, 1, 1);
  if (s == NULL || s->imported || !s->live || a == NULL || !a->live) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE; /* not the base of a live cuMemAlloc allocation */
  }
  ipcHandle h = {IPC_MAGIC, getpid(), s->fd, physical(a->dev), s->n, s->serial, {0}}; /* dev: the physical GPU */
  g_strict.ipc_exports++;
  pthread_mutex_unlock(&mu);
  memcpy(handle, &h, sizeof h);
  return CUDA_SUCCESS;
}

/* The handle is passed by value: 64 bytes, which the C ABI passes in memory. */
typedef struct {
  char reserved[64];
} CUipcMemHandle;

/* group_of returns the FAKECUDA_PEER_GROUPS group of physical GPU phys (-1: none). */
static int group_of(const char* groups, int phys) {
  int g = 0;
  for (const char* c = groups; *c;) {
    char* end;
    long v = strtol(c, &end, 10);
    if (end == c) {
      if (*c == ';') g++;
      c++;
      continue;
    }
    if (v == phys) return g;
    c = end;
  }
  return -1;
}

int peer_ok(int phys, int peer) {
  if (phys == peer) return 1;
  if (getenv("FAKECUDA_NO_PEER") != NULL) return 0;
  const char* groups = getenv("FAKECUDA_PEER_GROUPS");
  if (groups == NULL) return 1;
  int g = group_of(groups, phys);
  return g >= 0 && g == group_of(groups, peer);
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* out, CUipcMemHandle handle, unsigned int flags) {
  CALLED();
  if (flags != 1) return CUDA_ERROR_INVALID_VALUE; /* must be CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
  CUresult r = need_ctx();
  if (r) return r;
  ipcHandle h;
  memcpy(&h, &handle, sizeof h);
  if (h.magic != IPC_MAGIC || h.size == 0 || h.dev < 0 || h.dev >= NDEV) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* as the real driver: not in the exporter */
  if (!peer_ok(physical(t_current->dev), h.dev)) return CUDA_ERROR_INVALID_DEVICE;
  /* As the driver documents: a handle this context has open already gives the same
   * pointer, its reference count raised (one cuIpcCloseMemHandle no longer unmaps it). */
  pthread_mutex_lock(&mu);
  for (shared* o = g_shared; o; o = o->next) {
    if (o->imported && o->live && o->src_pid == h.pid && o->serial == h.serial && o->ctx == t_current) {
      o->refs++;
      g_strict.ipc_opens++;
      pthread_mutex_unlock(&mu);
      *out = (CUdeviceptr)(uintptr_t)o->p;
      return CUDA_SUCCESS;
    }
  }
  pthread_mutex_unlock(&mu);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE; /* the exporter exited or freed it */
  char* p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  unsigned* ctl = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)h.size);
  close(fd);
  if (p == MAP_FAILED || ctl == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  shared* s = calloc(1, sizeof *s);
  s->p = p;
  s->n = h.size;
  s->fd = -1;
  s->imported = 1;
  s->live = 1;
  s->serial = h.serial;
  s->src_pid = h.pid;
  s->ctx = t_current;
  s->refs = 1;
  pthread_mutex_lock(&mu);
  g_strict.ipc_opens++;
  mapping_opened(p, h.size, h.pid, ctl);
  int local = ordinal_of(h.dev); /* a GPU this process does not see: its own, as near enough */
  track(p, h.size, local >= 0 ? local : t_current->dev)->lazy_peer = 1; /* CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS */
  s->next = g_shared;
  g_shared = s;
  pthread_mutex_unlock(&mu);
  *out = (CUdeviceptr)(uintptr_t)p;
  return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  drain_ctx("cuIpcCloseMemHandle"); /* as the driver: it waits for the context's work */
  char* p = (char*)(uintptr_t)ptr;
  pthread_mutex_lock(&mu);
  shared* s = find_shared(p);
  if (s == NULL || !s->imported || !s->live) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE;
  }
  g_strict.ipc_closes++;
  if (--s->refs > 0) { /* opened again since: still mapped */
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
  }
  s->live = 0;
  mapping_closed(p);
  mark_dead(p);
  retire(p, s->n);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int* can, int dev, int peer) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= NDEV || peer < 0 || peer >= NDEV) return CUDA_ERROR_INVALID_DEVICE;
  *can = physical(dev) != physical(peer) && peer_ok(physical(dev), physical(peer));
  return CUDA_SUCCESS;
}

/* The fake devices' bus ids: 0000:1N:00.0 for physical GPU N, the same in every
 * process, whatever ordinal CUDA_VISIBLE_DEVICES gives it there (visible.c). */
CUresult cuDeviceGetPCIBusId(char* id, int len, int dev) {
  CALLED();
  if (!g_initialized) return CUDA_ERROR_NOT_INITIALIZED;
  if (dev < 0 || dev >= NDEV) return CUDA_ERROR_INVALID_DEVICE;
  if (id == NULL || len < 13) return CUDA_ERROR_INVALID_VALUE;
  snprintf(id, (size_t)len, "0000:%02X:00.0", 0x10 + physical(dev));
  return CUDA_SUCCESS;
}

/* ---- stream operations ---- */

static void pause_poll(void) {
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

/* run_dtod: arg[0] is unused; dst, src, n as for OP_COPY. mu held. */
static void run_dtod(op* o) {
  if (!live_dev(o->dst, o->n) || !live_dev(o->src, o->n)) {
    g_count.bad_access++;
    return;
  }
  check_write(o->dst, o->n, "a device copy (cuMemcpyDtoDAsync)", 0);
  check_read(o->src, o->n, "a device copy (cuMemcpyDtoDAsync)", 0);
  memmove(o->dst, o->src, o->n);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* stream) {
  CALLED();
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = stream_for(stream, &s);
  if (r == CUDA_SUCCESS && n > 0 &&
      (!live_dev((void*)(uintptr_t)dst, n) || !live_dev((void*)(uintptr_t)src, n)))
    r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS && n > 0) {
    check_write((void*)(uintptr_t)dst, n, "a device copy (cuMemcpyDtoDAsync)", 1);
    check_read((void*)(uintptr_t)src, n, "a device copy (cuMemcpyDtoDAsync)", 1);
    op* o = calloc(1, sizeof *o);
    o->kind = OP_CALL;
    o->call = run_dtod;
    o->dst = (char*)(uintptr_t)dst;
    o->src = (char*)(uintptr_t)src;
    o->n = n;
    push(s, o);
  }
  pthread_mutex_unlock(&mu);
  return r;
}

enum { WAIT_GEQ = 0, WAIT_EQ = 1, WAIT_AND = 2, WAIT_NOR = 3, WAIT_FLUSH = 1 << 30 };

static int wait_met(unsigned v, unsigned want, unsigned how) {
  switch (how) {
    case WAIT_GEQ: return (int)(v - want) >= 0; /* the driver's wrap-around comparison */
    case WAIT_EQ: return v == want;
    case WAIT_AND: return (v & want) != 0;
    case WAIT_NOR: return ~(v | want) != 0;
  }
  return 1;
}

/* run_wait: arg[0] the value, arg[1] the comparison. Polls with mu released, so other
 * streams (and this process's other work) go on; a peer process writes the flag. */
static void run_wait(op* o) {
  unsigned* flag = (unsigned*)o->dst;
  for (;;) {
    if (!live_dev(flag, 4)) {
      g_count.bad_access++;
      return;
    }
    check_read(flag, 4, "cuStreamWaitValue32", 0);
    check_device(flag, 4, o->stream->ctx->dev, "cuStreamWaitValue32");
    ts_hold(o->stream->ctx->dev); /* a waiting stream keeps (or takes back) its turn */
    if (wait_met(__atomic_load_n(flag, __ATOMIC_ACQUIRE), (unsigned)o->arg[0], (unsigned)o->arg[1])) return;
    pthread_mutex_unlock(&mu);
    pause_poll();
    pthread_mutex_lock(&mu);
  }
}

static void run_write(op* o) {
  unsigned* flag = (unsigned*)o->dst;
  if (!live_dev(flag, 4)) {
    g_count.bad_access++;
    return;
  }
  check_write(flag, 4, "cuStreamWriteValue32", 0);
  check_device(flag, 4, o->stream->ctx->dev, "cuStreamWriteValue32");
  __atomic_store_n(flag, (unsigned)o->arg[0], __ATOMIC_RELEASE);
}

static CUresult mem_op(void* stream, CUdeviceptr addr, unsigned value, unsigned how, void (*call)(op*)) {
  pthread_mutex_lock(&mu);
  fakeStream* s = NULL;
  CUresult r = stream_for(stream, &s);
  if (r == CUDA_SUCCESS && ((addr & 3) != 0 || !live_dev((void*)(uintptr_t)addr, 4))) r = CUDA_ERROR_INVALID_VALUE;
  if (r == CUDA_SUCCESS) {
    if (call == run_write)
      check_write((void*)(uintptr_t)addr, 4, "cuStreamWriteValue32", 1);
    else
      check_read((void*)(uintptr_t)addr, 4, "cuStreamWaitValue32", 1);
    op* o = calloc(1, sizeof *o);
    o->kind = OP_CALL;
    o->call = call;
    o->dst = (char*)(uintptr_t)addr;
    o->n = 4;
    o->arg[0] = value;
    o->arg[1] = how;
    push(s, o);
  }
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuStreamWaitValue32_v2(void* stream, CUdeviceptr addr, unsigned value, unsigned flags) {
  CALLED();
  unsigned how = flags & ~(unsigned)WAIT_FLUSH;
  if (how > WAIT_NOR) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = mem_op(stream, addr, value, how, run_wait);
  if (r == CUDA_SUCCESS) __atomic_add_fetch(&g_count.gpu_waits, 1, __ATOMIC_SEQ_CST);
  return r;
}

CUresult cuStreamWriteValue32_v2(void* stream, CUdeviceptr addr, unsigned value, unsigned flags) {
  CALLED();
  if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE; /* only CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER */
  return mem_op(stream, addr, value, 0, run_write);
}

int describe_wait(const op* o, char* buf, size_t n) {
  if (o->kind != OP_CALL || o->call != run_wait) return 0;
  unsigned* flag = (unsigned*)o->dst;
  snprintf(buf, n, "cuStreamWaitValue32 on the flag at %p (it holds %u; the wait needs %s %lu)", (void*)flag,
           live_dev(flag, 4) ? __atomic_load_n(flag, __ATOMIC_ACQUIRE) : 0u,
           o->arg[1] == WAIT_EQ ? "==" : o->arg[1] == WAIT_GEQ ? ">=" : "a mask test with", o->arg[0]);
  return 1;
}
