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
 * - p2psize: rank 1 sends rank 0 3000 floats, which rank 0 receives as 2900
 *   (one chunk each: without the check, rank 0 silently got truncated data);
 * - p2psizechunks: the same with 1 << 20 floats received as 1000 (different
 *   chunk counts: without the check, the streams waited until the timeout).
 *   In both, every rank's turns goncclMismatch naming both sizes;
 * - a2avsize: an alltoallv of 100 floats per pair, but rank 1 sends rank 0
 *   200 (one chunk each: without the check, rank 0 silently kept half): the
 *   same;
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
  } else if (strcmp(what, "p2psize") == 0 ||
             strcmp(what, "p2psizechunks") == 0) {
    size_t sent = 3000, expect = 2900;
    if (strcmp(what, "p2psizechunks") == 0) sent = 1 << 20, expect = 1000;
    float* big = fakecudaMalloc(dev, sent * sizeof(float));
    CHECK(big != NULL, "fakecudaMalloc");
    if (rank == 1)
      OK(goncclSend(big, sent, goncclFloat32, 0, comm, stream), comm);
    else if (rank == 0)
      OK(goncclRecv(big, expect, goncclFloat32, 1, comm, stream), comm);
    goncclResult_t got = await_error(comm, t0);
    CHECK(got == goncclMismatch, "want goncclMismatch, got %s",
          goncclGetErrorString(got));
    char text[160];
    snprintf(text, sizeof text,
             "rank 1 sent %zu bytes to rank 0 (device message #1) but rank "
             "0's receive expects %zu bytes",
             sent * sizeof(float), expect * sizeof(float));
    const char* msg = goncclGetLastError(comm);
    CHECK(strstr(msg, text) != NULL, "message: %s", msg);
    printf("rank %d: named the sizes\n", rank);
    fakecudaStreamDrain(stream);
    fakecudaFree(big);
    want = got;
  } else if (strcmp(what, "a2avsize") == 0) {
    size_t sc[8], sd[8], rc[8], rd[8];
    CHECK(nranks <= 8 && n >= 2 * 200 * (size_t)nranks, "a2avsize: %d ranks",
          nranks);
    for (int p = 0; p < nranks; p++) {
      sc[p] = rc[p] = 100;
      sd[p] = rd[p] = 200 * (size_t)p;
    }
    if (rank == 1) sc[0] = 200;
    float* out = buf + n / 2;
    /* A rank that comes late may find its communicator broken already. */
    goncclResult_t r =
        goncclAlltoAllv(buf, sc, sd, out, rc, rd, goncclFloat32, comm, stream);
    CHECK(r == goncclSuccess || r == goncclMismatch, "goncclAlltoAllv: %s",
          goncclGetErrorString(r));
    goncclResult_t got = await_error(comm, t0);
    CHECK(got == goncclMismatch, "want goncclMismatch, got %s",
          goncclGetErrorString(got));
    const char* msg = goncclGetLastError(comm);
    CHECK(strstr(msg,
                 "rank 1 sent 800 bytes to rank 0 (device message #1) "
                 "but rank 0's receive expects 400 bytes") != NULL,
          "message: %s", msg);
    printf("rank %d: named the sizes\n", rank);
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
