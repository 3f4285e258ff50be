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
 *   reset-current: a call made with a reset context current.
 * Linked with the fake; calls its driver entry points directly (CUresult is an int).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"

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

#define EXPECT(cond)                                            \
  do {                                                          \
    if (!(cond)) {                                              \
      fprintf(stderr, "unexpected: %s (line %d)\n", #cond, __LINE__); \
      return 3;                                                 \
    }                                                           \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s MODE\n", argv[0]);
    return 2;
  }
  const char* m = argv[1];
  int ok = strcmp(m, "ok") == 0;
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
