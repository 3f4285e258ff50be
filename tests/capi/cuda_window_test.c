/*
 * One-sided windows on device memory through the C ABI, against the fake CUDA driver:
 * run one process per rank as
 *     GONCCL_CUDA_LIBRARY=/path/libfakecuda.so cuda_window_test RANK NRANKS ID_FILE
 * Rank r's window is cuMemAlloc memory on device r % 2 (CUDA_WINDOW_TEST_ONE_DEVICE=1:
 * device 0 for all). Each round every rank puts values naming it and the round into
 * every rank's window (its own too) at its own offset, from a source a slow fake kernel
 * fills first, and signals (blocking and async); after goncclWaitSignal from a peer the
 * peer's values must be in the window. goncclWinMemory of a peer is a device address
 * aliasing its window (read back after the peer's signal to us). Then: a put from host
 * memory and a goncclPutOnStream on a host window are refused, and with FAKECUDA_NO_PEER
 * (GPUs that cannot access each other) registering is refused on every rank; deregistering unmaps
 * everywhere before the barrier, so each rank frees its memory after it (the fake checks
 * that no live process still maps memory it frees).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "gonccl.h"
#include "test_harness.h"

int cuCtxSetCurrent(void* ctx);
int cuMemAlloc_v2(unsigned long long* p, size_t n);
int cuMemFree_v2(unsigned long long p);

#define ELEMS 4096
#define ROUNDS 3

static int dev;

static float* dalloc(size_t n) {
  unsigned long long p = 0;
  CHECK(cuMemAlloc_v2(&p, n * sizeof(float)) == 0, "cuMemAlloc");
  return (float*)(uintptr_t)p;
}

static float value(int from, int round, int i) { return (float)(from * 100000 + round * 1000 + i % 1000); }

static void check_from(const float* got, int from, int round, const char* what) {
  for (int i = 0; i < ELEMS; i++) {
    CHECK(got[i] == value(from, round, i), "MISMATCH %s: round %d, from rank %d, element %d: %g, want %g", what, round,
          from, i, got[i], value(from, round, i));
  }
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  const char* one = getenv("CUDA_WINDOW_TEST_ONE_DEVICE");
  dev = one != NULL && strcmp(one, "1") == 0 ? 0 : rank % 2;
  CHECK(cuCtxSetCurrent(fakecudaContext(dev)) == 0, "cuCtxSetCurrent");
  fakecudaSetDelay(0, 300);
  void* stream = fakecudaStreamCreateWithFlags(dev, 1); /* non-blocking, like torch's */

  goncclUniqueId id;
  share_id(argv[3], &id);
  goncclComm_t comm;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, 60000), NULL);

  float* win_mem = dalloc((size_t)nranks * ELEMS);
  float* src = dalloc(ELEMS);
  goncclWindow_t win;
  OK(goncclWinCreate(comm, &win), comm);
  if (getenv("FAKECUDA_NO_PEER") != NULL) {
    /* GPUs that cannot access each other: every rank is refused, saying why. */
    goncclResult_t rr = goncclWinRegister(win, win_mem, (size_t)nranks * ELEMS, goncclFloat32);
    CHECK(rr == goncclInvalidArgument && strstr(goncclGetLastError(comm), "no peer access between them") != NULL,
          "register on GPUs without peer access: %s", goncclGetLastError(comm));
    OK(goncclWinFree(win), comm);
    CHECK(cuMemFree_v2((unsigned long long)(uintptr_t)win_mem) == 0, "cuMemFree");
    OK(goncclCommDestroy(comm), NULL);
    printf("rank %d: refused without peer access; %d window checks passed\n", rank, checks);
    return 0;
  }
  OK(goncclWinRegister(win, win_mem, (size_t)nranks * ELEMS, goncclFloat32), comm);
  goncclWinAccess_t access;
  size_t count = 0;
  goncclDataType_t type;
  for (int p = 0; p < nranks; p++) {
    OK(goncclWinGetAttr(win, p, &access), comm);
    CHECK(access == goncclWinUnified, "rank %d's device window is not UNIFIED", p);
    OK(goncclWinGetInfo(win, p, &count, &type), comm);
    CHECK(count == (size_t)nranks * ELEMS && type == goncclFloat32, "rank %d's window info", p);
  }
  void* own = NULL;
  size_t bytes = 0;
  OK(goncclWinMemory(win, rank, &own, &bytes, NULL), comm);
  CHECK(own == win_mem && bytes == (size_t)nranks * ELEMS * sizeof(float), "own window memory is the registered memory");

  float* host = malloc(ELEMS * sizeof(float));
  for (int k = 0; k < ROUNDS; k++) {
    /* A slow kernel writes the source; the put, queued after it, must copy its result. */
    for (int i = 0; i < ELEMS; i++) host[i] = value(rank, k, i) - 7.0f;
    fakecudaStreamDrain(stream);
    memcpy(src, host, ELEMS * sizeof(float));
    fakecudaAddF32(stream, src, ELEMS, 7.0f, 20000);
    for (int q = 0; q < nranks; q++) {
      size_t off = (size_t)rank * ELEMS;
      if (q % 2 == 0) {
        OK(goncclPutOnStream(src, ELEMS, goncclFloat32, q, off, win, stream), comm);
      } else {
        goncclRequest_t req;
        OK(goncclPutOnStream(src, ELEMS / 2, goncclFloat32, q, off, win, stream), comm);
        OK(goncclPutOnStream(src + ELEMS / 2, ELEMS / 2, goncclFloat32, q, off + ELEMS / 2, win, stream), comm);
        OK(goncclSignalAsync(q, win, &req), comm);
        OK(goncclRequestWait(req, -1), comm);
        OK(goncclRequestFree(req), comm);
        continue;
      }
      OK(goncclSignal(q, win), comm);
    }
    for (int p = 0; p < nranks; p++) {
      OK(goncclWaitSignal(p, win), comm);
      check_from(win_mem + (size_t)p * ELEMS, p, k, "own window");
    }
    /* A peer's window as mapped here holds what this rank put there (its signal went
     * out after the put had landed). */
    int q = (rank + 1) % nranks;
    void* peer = NULL;
    goncclWinHold_t hold;
    OK(goncclWinMemory(win, q, &peer, &bytes, &hold), comm);
    check_from((const float*)peer + (size_t)rank * ELEMS, rank, k, "peer's window as mapped here");
    OK(goncclWinHoldRelease(hold), comm);
    OK(goncclAllReduce(&k, &k, 1, goncclInt32, goncclMax, comm, NULL), comm); /* a barrier */
  }

  /* Bad input: host memory into a device window; a stream put into a host window. */
  goncclResult_t r = goncclPut(host, 4, goncclFloat32, 0, 0, win);
  CHECK(r == goncclInvalidArgument && strstr(goncclGetLastError(comm), "not device memory") != NULL,
        "a put from host memory into a device window: %s", goncclGetLastError(comm));
  r = goncclPutOnStream(src, (size_t)nranks * ELEMS + 1, goncclFloat32, 0, 0, win, stream);
  CHECK(r == goncclInvalidArgument && strstr(goncclGetLastError(comm), "do not fit") != NULL,
        "a put past the window: %s", goncclGetLastError(comm));

  OK(goncclWinDeregister(win), comm);
  /* Every peer has unmapped it: the fake checks as it frees. */
  CHECK(cuMemFree_v2((unsigned long long)(uintptr_t)win_mem) == 0, "cuMemFree of the window memory");
  CHECK(cuMemFree_v2((unsigned long long)(uintptr_t)src) == 0, "cuMemFree of the source");
  OK(goncclWinFree(win), comm);

  float init[4] = {1, 2, 3, 4};
  OK(goncclWinCreate(comm, &win), comm);
  OK(goncclWinRegister(win, init, 4, goncclFloat32), comm);
  float* d4 = dalloc(4);
  r = goncclPutOnStream(d4, 4, goncclFloat32, 0, 0, win, stream);
  CHECK(r == goncclInvalidArgument && strstr(goncclGetLastError(comm), "holds host memory") != NULL,
        "goncclPutOnStream into a host window: %s", goncclGetLastError(comm));
  OK(goncclWinDeregister(win), comm);
  OK(goncclWinFree(win), comm);

  fakecudaCounters c;
  fakecudaGetCounters(&c);
  CHECK(c.bad_access == 0, "%ld queued operations touched freed or unmapped memory", c.bad_access);
  OK(goncclCommDestroy(comm), NULL);
  free(host);
  printf("rank %d: %d window checks passed\n", rank, checks);
  return 0;
}
