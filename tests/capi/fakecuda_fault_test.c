/*
 * The strict fake CUDA driver (tests/fakecuda) faults where the real driver is
 * unforgiving: run as `fakecuda_fault_test MODE`, each mode makes one such mistake and
 * must die of it (tests/test_cuda_capi.py checks the signal and the FAULT line), and
 * mode "ok" does the same things correctly and must exit 0:
 *   event-query, event-record, event-wait: a destroyed event used again;
 *   pinned-host: freed pinned memory written by the host (SIGSEGV);
 *   pinned-copy: a copy queued on pinned memory that is freed before it runs (SIGSEGV):
 *     the copy is on a stream of device 1, as cuMemFreeHost waits only for the work of
 *     the current context (device 0's);
 *   reset-stream: a stream used after the primary context's last reference is gone;
 *   reset-current: a call made with a reset context current;
 *   memop-peer: a stream memory operation of device 1 writes device 0's cuMemAlloc
 *     memory, without peer access (the GPU's own write: an illegal address);
 *   ipc-freed: a child process exports cuMemAlloc memory, this one maps it, the child
 *     frees it all the same (fakecudaFreeExported: as PyTorch's allocator frees a
 *     segment whatever a peer mapped), and this one's stream then reads it.
 * Mode ipc-reset, like "ok", must exit 0: a child exports cuMemAlloc memory, this
 * process maps it, and its primary context is reset: the mapping went with the
 * context (a copy from it is refused), and opening the handle again in the new context
 * maps it anew (a copy from it works).
 * Mode "ok" also checks that a stream memory operation takes registered host memory
 * only where it was registered with CU_MEMHOSTREGISTER_DEVICEMAP (it has a device
 * address only then), and refuses it otherwise.
 * Linked with the fake; calls its driver entry points directly (CUresult is an int).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fakecuda.h"
#include "fakecuda_strict.h"

int cuCtxSetCurrent(void* ctx);
int cuEventCreate(void** ev, unsigned flags);
int cuEventRecord(void* ev, void* stream);
int cuEventQuery(void* ev);
int cuEventDestroy_v2(void* ev);
int cuStreamWaitEvent(void* stream, void* ev, unsigned flags);
int cuMemHostAlloc(void** p, size_t n, unsigned flags);
int cuMemFreeHost(void* p);
int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, void* stream);
int cuDevicePrimaryCtxRetain(void** ctx, int dev);
int cuDevicePrimaryCtxRelease_v2(int dev);
int cuInit(unsigned flags);
int cuMemAlloc_v2(unsigned long long* p, size_t n);
int cuStreamWriteValue32_v2(void* stream, unsigned long long addr, unsigned value, unsigned flags);
int cuMemHostRegister_v2(void* p, size_t n, unsigned flags);
int cuMemHostUnregister(void* p);
int cuIpcGetMemHandle(void* handle, unsigned long long p);
typedef struct {
  char reserved[64];
} ipcHandle;
int cuIpcOpenMemHandle_v2(unsigned long long* p, ipcHandle h, unsigned flags);
int cuMemcpyDtoDAsync_v2(unsigned long long dst, unsigned long long src, size_t n, void* stream);

#define EXPECT(cond)                                            \
  do {                                                          \
    if (!(cond)) {                                              \
      fprintf(stderr, "unexpected: %s (line %d)\n", #cond, __LINE__); \
      return 3;                                                 \
    }                                                           \
  } while (0)

/* exporter is the child of the IPC modes: it exports cuMemAlloc memory, sends the
 * handle, and once told frees it while this process maps it (free) or keeps it; it
 * stays alive until the parent closes its pipe. */
static void exporter(int to_parent, int to_child, int free_it) {
  ipcHandle h;
  unsigned long long p = 0;
  char b = 0;
  if (cuInit(0) != 0 || cuCtxSetCurrent(fakecudaContext(0)) != 0 || cuMemAlloc_v2(&p, 4096) != 0 ||
      cuIpcGetMemHandle(&h, p) != 0)
    _exit(3);
  if (write(to_parent, &h, sizeof h) != sizeof h || read(to_child, &b, 1) != 1) _exit(3);
  if (free_it && fakecudaFreeExported((void*)(size_t)p) != 0) _exit(3);
  if (write(to_parent, &b, 1) != 1) _exit(3);
  while (read(to_child, &b, 1) > 0) { /* alive until the parent is done */
  }
  _exit(0);
}

/* ipc_freed is mode ipc-freed: it returns only if the fake missed the read. */
static int ipc_freed(void) {
  int to_parent[2], to_child[2];
  EXPECT(pipe(to_parent) == 0 && pipe(to_child) == 0);
  pid_t pid = fork();
  EXPECT(pid >= 0);
  if (pid == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    exporter(to_parent[1], to_child[0], 1);
  }
  close(to_child[0]);
  close(to_parent[1]);
  ipcHandle h;
  char b = 1;
  EXPECT(read(to_parent[0], &h, sizeof h) == sizeof h);
  EXPECT(cuInit(0) == 0);
  EXPECT(cuCtxSetCurrent(fakecudaContext(0)) == 0);
  unsigned long long mapped = 0, dst = 0;
  EXPECT(cuIpcOpenMemHandle_v2(&mapped, h, 1) == 0);
  EXPECT(cuMemAlloc_v2(&dst, 4096) == 0);
  void* s = fakecudaStreamCreateWithFlags(0, 1);
  EXPECT(cuMemcpyDtoDAsync_v2(dst, mapped, 4096, s) == 0); /* still the exporter's: fine */
  fakecudaStreamDrain(s);
  EXPECT(write(to_child[1], &b, 1) == 1);
  EXPECT(read(to_parent[0], &b, 1) == 1); /* the exporter freed it */
  cuMemcpyDtoDAsync_v2(dst, mapped, 4096, s);
  fakecudaStreamDrain(s);
  close(to_child[1]);
  waitpid(pid, NULL, 0);
  return 1;
}

/* ipc_reset is mode ipc-reset: 0 if the fake behaved. */
static int ipc_reset(void) {
  int to_parent[2], to_child[2];
  EXPECT(pipe(to_parent) == 0 && pipe(to_child) == 0);
  pid_t pid = fork();
  EXPECT(pid >= 0);
  if (pid == 0) {
    close(to_child[1]);
    close(to_parent[0]);
    exporter(to_parent[1], to_child[0], 0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  ipcHandle h;
  char b = 1;
  EXPECT(read(to_parent[0], &h, sizeof h) == sizeof h);
  EXPECT(cuInit(0) == 0);
  EXPECT(cuCtxSetCurrent(fakecudaContext(0)) == 0);
  unsigned long long mapped = 0, again = 0, dst = 0;
  EXPECT(cuIpcOpenMemHandle_v2(&mapped, h, 1) == 0);
  EXPECT(fakecudaRuntimeRelease(0) == 0); /* the last reference: the context resets */
  EXPECT(cuCtxSetCurrent(fakecudaContext(0)) == 0); /* a new primary context */
  EXPECT(cuMemAlloc_v2(&dst, 4096) == 0);
  void* s = fakecudaStreamCreateWithFlags(0, 1);
  EXPECT(cuMemcpyDtoDAsync_v2(dst, mapped, 4096, s) == 1); /* gone with the old context */
  EXPECT(cuIpcOpenMemHandle_v2(&again, h, 1) == 0);
  EXPECT(cuMemcpyDtoDAsync_v2(dst, again, 4096, s) == 0);
  fakecudaStreamDrain(s);
  fakecudaCounters c;
  fakecudaGetCounters(&c);
  EXPECT(c.bad_access == 0);
  EXPECT(write(to_child[1], &b, 1) == 1);
  EXPECT(read(to_parent[0], &b, 1) == 1);
  close(to_child[1]);
  EXPECT(waitpid(pid, NULL, 0) == pid);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODE\n", argv[0]);
    return 2;
  }
  const char* m = argv[1];
  int ok = strcmp(m, "ok") == 0;
  if (strcmp(m, "ipc-reset") == 0) {
    if (ipc_reset() != 0) return 3;
    printf("ok\n");
    return 0;
  }
  if (strcmp(m, "ipc-freed") == 0) {
    ipc_freed();
    fprintf(stderr, "mode %s: survived a mistake the fake should have faulted on\n", m);
    return 1;
  }
  EXPECT(cuInit(0) == 0);
  EXPECT(cuCtxSetCurrent(fakecudaContext(0)) == 0);
  void* s = fakecudaStreamCreateWithFlags(0, 1);
  void* ev = NULL;
  EXPECT(cuEventCreate(&ev, 2) == 0);
  EXPECT(cuEventRecord(ev, s) == 0);
  fakecudaStreamDrain(s);
  EXPECT(cuEventQuery(ev) == 0);
  EXPECT(cuStreamWaitEvent(s, ev, 0) == 0);
  EXPECT(cuEventDestroy_v2(ev) == 0);
  if (strcmp(m, "event-query") == 0) cuEventQuery(ev);
  if (strcmp(m, "event-record") == 0) cuEventRecord(ev, s);
  if (strcmp(m, "event-wait") == 0) cuStreamWaitEvent(s, ev, 0);

  char* host = NULL;
  EXPECT(cuMemHostAlloc((void**)&host, 4096, 1) == 0);
  char* dev = fakecudaMalloc(0, 4096);
  memset(host, 1, 4096);
  void* s1 = NULL;
  if (strcmp(m, "pinned-copy") == 0) {
    s1 = fakecudaStreamCreateWithFlags(1, 1);
    char* dev1 = fakecudaMalloc(1, 4096);
    fakecudaStreamSetDelay(s1, 50000); /* the copy runs after the free */
    EXPECT(cuCtxSetCurrent(fakecudaContext(1)) == 0);
    EXPECT(cuMemcpyDtoHAsync_v2(host, (unsigned long long)(size_t)dev1, 4096, s1) == 0);
    EXPECT(cuCtxSetCurrent(fakecudaContext(0)) == 0);
  }
  EXPECT(cuMemFreeHost(host) == 0);
  if (strcmp(m, "pinned-host") == 0) host[10] = 7;
  fakecudaStreamDrain(s);
  if (s1 != NULL) fakecudaStreamDrain(s1);

  /* Stream memory operations take device pointers: registered host memory only where
   * it has a device address (DEVICEMAP), and only memory the stream's GPU can reach. */
  char* page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT(page != MAP_FAILED);
  EXPECT(cuMemHostRegister_v2(page, 4096, 0x1) == 0); /* PORTABLE only */
  EXPECT(cuStreamWriteValue32_v2(s, (unsigned long long)(size_t)page, 1, 0) == 1); /* CUDA_ERROR_INVALID_VALUE */
  EXPECT(cuMemHostUnregister(page) == 0);
  EXPECT(cuMemHostRegister_v2(page, 4096, 0x1 | 0x2) == 0);
  EXPECT(cuStreamWriteValue32_v2(s, (unsigned long long)(size_t)page, 1, 0) == 0);
  fakecudaStreamDrain(s);
  EXPECT(*(unsigned*)page == 1);
  EXPECT(cuMemHostUnregister(page) == 0);
  unsigned long long d0 = 0;
  EXPECT(cuMemAlloc_v2(&d0, 4096) == 0);
  EXPECT(cuStreamWriteValue32_v2(s, d0, 1, 0) == 0); /* device 0's own */
  fakecudaStreamDrain(s);
  if (strcmp(m, "memop-peer") == 0) {
    void* s1 = fakecudaStreamCreateWithFlags(1, 1);
    EXPECT(cuCtxSetCurrent(fakecudaContext(1)) == 0);
    EXPECT(cuStreamWriteValue32_v2(s1, d0, 2, 0) == 0);
    fakecudaStreamDrain(s1);
    fprintf(stderr, "mode %s: survived a mistake the fake should have faulted on\n", m);
    return 1;
  }

  /* The runtime's reference and one of our own: releasing ours keeps the context. */
  void* ctx = NULL;
  EXPECT(cuDevicePrimaryCtxRetain(&ctx, 0) == 0 && ctx == fakecudaContext(0));
  EXPECT(cuDevicePrimaryCtxRelease_v2(0) == 0);
  EXPECT(cuEventCreate(&ev, 2) == 0);
  EXPECT(cuEventRecord(ev, s) == 0);
  fakecudaStreamDrain(s);
  if (!ok) {
    /* The runtime goes (cudaDeviceReset, or its teardown at exit): the context resets. */
    EXPECT(fakecudaRuntimeRelease(0) == 0);
    fakecudaCounters c;
    fakecudaGetCounters(&c);
    EXPECT(c.primary_resets == 1);
    if (strcmp(m, "reset-stream") == 0) fakecudaFillF32(s, dev, 1, 1, 0);
    if (strcmp(m, "reset-current") == 0) cuEventCreate(&ev, 2);
    if (strcmp(m, "reset-event") == 0) cuEventQuery(ev);
    fprintf(stderr, "mode %s: survived a mistake the fake should have faulted on\n", m);
    return 1;
  }
  printf("ok\n");
  return 0;
}
