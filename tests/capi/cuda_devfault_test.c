/*
 * cuda_devfault_test.c: failures on the device path (GONCCL_DEVICE_PATH=1)
 * through the C ABI, against the fake CUDA driver, one process per rank.
 * Usage: RANK NRANKS ID_FILE CASE, where CASE is
 *
 * - count: rank 1 all_reduces 3000 floats, the others 1000; every rank's
 *   goncclCommGetAsyncError turns goncclMismatch, naming the rank and the
 *   count;
 * - kill: the last rank enqueues an all_reduce and SIGKILLs itself; the
 *   others' turns goncclRemoteError (or goncclTimeout), naming it;
 * - abort: rank 1 never issues the all_reduce rank 0 enqueued; rank 0 aborts
 *   its communicator, which must release its waiting stream;
 * - p2pkill: the others enqueue a goncclRecv from the last rank, which
 *   SIGKILLs itself without sending; theirs turns goncclRemoteError (or
 *   goncclTimeout), naming it;
 * - p2pstall (communicator timeout 1.5 s): rank 0 sends 8 MiB to rank 1,
 *   which never posts the receive; rank 0 writes its flight recorder to
 *   p2pstall_rank0.json once the send is on its stream, then its watcher
 *   times the send out and every rank turns goncclTimeout (or
 *   goncclRemoteError).
 *
 * In every case the survivors' stream must drain (cuStreamSynchronize
 * returns: released, not waiting on a flag for ever), and the next call must
 * fail. The harness kills a rank that hangs.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"
#include "gonccl.h"
#include "test_harness.h"

int cuCtxSetCurrent(void* ctx);

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Waits up to 30 s for comm's asynchronous error; prints and returns it. */
static goncclResult_t await_error(goncclComm_t comm, double since) {
  goncclResult_t async = goncclSuccess;
  for (int i = 0; i < 3000 && async == goncclSuccess; i++) {
    OK(goncclCommGetAsyncError(comm, &async), comm);
    if (async == goncclSuccess) usleep(10000);
  }
  CHECK(async != goncclSuccess, "no asynchronous error within 30 s");
  printf("rank %d: async error after %.0f ms: %s: %s\n", rank,
         (now() - since) * 1e3, goncclGetErrorString(async),
         goncclGetLastError(comm));
  fflush(stdout);
  return async;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE CASE\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  const char* what = argv[4];
  int dev = rank % 2;
  CHECK(cuCtxSetCurrent(fakecudaContext(dev)) == 0, "cuCtxSetCurrent");
  fakecudaSetDelay(0, 100);
  void* stream = fakecudaStreamCreate(dev);
  goncclUniqueId id;
  share_id(argv[3], &id);
  goncclComm_t comm;
  int stall = strcmp(what, "p2pstall") == 0;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, stall ? 1500 : 10000),
     NULL);

  size_t n = 3000;
  float* buf = fakecudaMalloc(dev, n * sizeof(float));
  CHECK(buf != NULL, "fakecudaMalloc");
  /* One all_reduce every rank agrees on: the device path works. */
  CHECK(fakecudaFillF32(stream, buf, n, 1, 0) == 0, "fill");
  OK(goncclAllReduce(buf, buf, 1000, goncclFloat32, goncclSum, comm, stream),
     comm);
  fakecudaStreamDrain(stream);
  CHECK(buf[999] == (float)nranks, "agreed all_reduce: %f, want %d", buf[999],
        nranks);

  double t0 = now();
  goncclResult_t want = goncclSuccess;
  if (strcmp(what, "count") == 0) {
    OK(goncclAllReduce(buf, buf, rank == 1 ? 3000 : 1000, goncclFloat32,
                       goncclSum, comm, stream),
       comm);
    goncclResult_t got = await_error(comm, t0);
    /* Every rank names the mismatch: its own watcher saw it, or a peer's did
     * and told it ("rank N reports: ..."). */
    CHECK(got == goncclMismatch, "want goncclMismatch, got %s",
          goncclGetErrorString(got));
    const char* msg = goncclGetLastError(comm);
    CHECK(strstr(msg, "differs in count") != NULL, "message: %s", msg);
    int other = rank == 1 ? strstr(msg, "rank 0 differs in count") != NULL ||
                                strstr(msg, "rank 0 reports") != NULL ||
                                strstr(msg, "rank 2 reports") != NULL
                          : strstr(msg, "rank 1 differs in count") != NULL ||
                                strstr(msg, "rank 1 reports") != NULL;
    CHECK(other, "the message must name the rank on the other side: %s", msg);
    printf("rank %d: named the mismatch\n", rank);
    want = got;
  } else if (strcmp(what, "kill") == 0) {
    OK(goncclAllReduce(buf, buf, n, goncclFloat32, goncclSum, comm, stream),
       comm);
    if (rank == nranks - 1) {
      printf("rank %d: enqueued, dying\n", rank);
      fflush(stdout);
      raise(SIGKILL);
    }
    goncclResult_t got = await_error(comm, t0);
    CHECK(got == goncclRemoteError || got == goncclTimeout, "got %s",
          goncclGetErrorString(got));
    char victim[32];
    snprintf(victim, sizeof victim, "rank %d", nranks - 1);
    CHECK(strstr(goncclGetLastError(comm), victim) != NULL,
          "the error must name %s: %s", victim, goncclGetLastError(comm));
    want = got;
  } else if (strcmp(what, "p2pkill") == 0) {
    if (rank == nranks - 1) {
      usleep(300000); /* the others' receives are on their streams by then */
      printf("rank %d: enqueued, dying\n", rank);
      fflush(stdout);
      raise(SIGKILL);
    }
    OK(goncclRecv(buf, n, goncclFloat32, nranks - 1, comm, stream), comm);
    goncclResult_t got = await_error(comm, t0);
    CHECK(got == goncclRemoteError || got == goncclTimeout, "got %s",
          goncclGetErrorString(got));
    char victim[32];
    snprintf(victim, sizeof victim, "rank %d", nranks - 1);
    CHECK(strstr(goncclGetLastError(comm), victim) != NULL,
          "the error must name %s: %s", victim, goncclGetLastError(comm));
    want = got;
  } else if (stall) {
    if (rank == 0) {
      size_t big = 2 << 20; /* 8 MiB: more chunks than the slots in flight */
      float* msg = fakecudaMalloc(dev, big * sizeof(float));
      CHECK(msg != NULL, "fakecudaMalloc");
      OK(goncclSend(msg, big, goncclFloat32, 1, comm, stream), comm);
      usleep(300000); /* on the GPU, waiting for rank 1 to drain its slots */
      OK(goncclCommDumpTrace(comm, "p2pstall_rank0.json"), comm);
      printf("rank %d: send on the GPU, dumped\n", rank);
      fflush(stdout);
    }
    want = await_error(comm, t0);
    CHECK(want == goncclTimeout || want == goncclRemoteError, "got %s",
          goncclGetErrorString(want));
  } else if (strcmp(what, "abort") == 0) {
    if (rank == 0) {
      OK(goncclAllReduce(buf, buf, n, goncclFloat32, goncclSum, comm, stream),
         comm);
      usleep(200000); /* its stream waits for rank 1's flags */
      OK(goncclCommAbort(comm), NULL);
      fakecudaStreamDrain(stream);
      printf("rank %d: stream drained after abort\n", rank);
    } else {
      usleep(1000000);
      OK(goncclCommAbort(comm), NULL);
    }
    fakecudaFree(buf);
    return 0;
  } else {
    CHECK(0, "no case %s", what);
  }
  fakecudaStreamDrain(
      stream); /* released: returns, or the harness kills this rank */
  printf("rank %d: stream drained\n", rank);
  goncclResult_t r =
      goncclAllReduce(buf, buf, 1, goncclFloat32, goncclSum, comm, stream);
  CHECK(r == want, "the next call returned %s, want %s",
        goncclGetErrorString(r), goncclGetErrorString(want));
  OK(goncclCommAbort(comm), NULL);
  fakecudaFree(buf);
  printf("rank %d: %d checks passed\n", rank, checks);
  return 0;
}
