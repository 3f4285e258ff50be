/*
 * gonccl's C ABI on "device" buffers with CUDA streams, against the fake CUDA driver
 * (tests/fakecuda): run one process per rank as
 *     GONCCL_CUDA_LIBRARY=/path/libfakecuda.so cuda_capi_test RANK NRANKS ID_FILE
 * linked with the same libfakecuda.so, whose hooks allocate device memory, create
 * streams and queue slow fake kernels. Rank 0 writes the unique id to ID_FILE.
 *
 * Besides values, it checks the staging contract: a slow kernel queued on the stream
 * before a collective writes its input and the collective sees it; work queued on the
 * stream after a blocking call, or on another stream after goncclRequestWaitStream,
 * sees the result; no queued copy touches freed memory and the pinned pool is freed
 * by goncclCommDestroy; bad pointers and streams give errors naming the CUDA error.
 * Ranks r and r+2 use the same device, as several ranks may share one GPU.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "gonccl.h"
#include "test_harness.h"

/* Slow enough that a collective that does not wait for it reads stale input. */
#define SLOW_US 30000

static int dev;
static void* stream; /* gonccl's stream */
static void* other;  /* a second stream of the same device, ordered with WaitStream */

static float* dmalloc(size_t n) {
  float* p = fakecudaMalloc(dev, (n ? n : 1) * sizeof(float));
  CHECK(p != NULL, "fakecudaMalloc");
  return p;
}

static float tri(void) { return (float)(nranks * (nranks + 1) / 2); }

static void test_allreduce(goncclComm_t comm) {
  size_t counts[] = {1, 1000, 300001};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c];
    float *send = dmalloc(n), *recv = dmalloc(n);
    /* The input is written by a slow kernel queued before the call. */
    CHECK(fakecudaFillF32(stream, send, n, (float)(rank + 1), SLOW_US) == 0, "fill");
    OK(goncclAllReduce(send, recv, n, goncclFloat32, goncclSum, comm, stream), comm);
    /* Work queued after the blocking call sees the result. */
    CHECK(fakecudaAddF32(stream, recv, n, 100, 0) == 0, "add");
    fakecudaStreamDrain(stream);
    for (size_t i = 0; i < n; i++)
      CHECK(recv[i] == tri() + 100, "allreduce n=%zu [%zu] = %f, want %f", n, i, recv[i], tri() + 100);
    /* In place. */
    CHECK(fakecudaFillF32(stream, send, n, (float)(2 * rank), SLOW_US) == 0, "fill");
    OK(goncclAllReduce(send, send, n, goncclFloat32, goncclMax, comm, stream), comm);
    fakecudaStreamDrain(stream);
    for (size_t i = 0; i < n; i++)
      CHECK(send[i] == (float)(2 * (nranks - 1)), "allreduce max in place [%zu] = %f", i, send[i]);
    fakecudaFree(send);
    fakecudaFree(recv);
  }
}

/* Async: several operations in flight, each waited for by another stream. */
static void test_async_wait_stream(goncclComm_t comm) {
  enum { K = 4 };
  size_t n = 50000;
  float* bufs[K];
  goncclRequest_t reqs[K];
  for (int k = 0; k < K; k++) {
    bufs[k] = dmalloc(n);
    CHECK(fakecudaFillF32(stream, bufs[k], n, (float)(rank + k), k == 0 ? SLOW_US : 0) == 0, "fill");
    OK(goncclAllReduceAsync(bufs[k], bufs[k], n, goncclFloat32, goncclSum, comm, stream, &reqs[k]), comm);
  }
  /* A slow kernel after the calls holds every H2D copy back: only a stream that really
   * waits on the completion events sees the results. */
  float* scratch = dmalloc(1);
  CHECK(fakecudaFillF32(stream, scratch, 1, 0, SLOW_US) == 0, "fill");
  /* Once their host parts are done, their H2D copies are still queued behind the slow
   * kernel: an operation on another stream must not get their pinned buffers yet (the
   * fake counts a copy queued on pinned memory another stream's pending copy uses). */
  for (int k = 0; k < K; k++) OK(goncclRequestWait(reqs[k], -1), comm);
  float* x = dmalloc(n);
  CHECK(fakecudaFillF32(other, x, n, (float)(rank + 100), 0) == 0, "fill");
  OK(goncclAllReduce(x, x, n, goncclFloat32, goncclSum, comm, other), comm);
  fakecudaStreamDrain(other);
  for (size_t i = 0; i < n; i += 997) CHECK(x[i] == tri() - nranks + 100 * nranks, "other stream [%zu] = %f", i, x[i]);
  fakecudaFree(x);
  for (int k = 0; k < K; k++) {
    OK(goncclRequestWaitStream(reqs[k], other), comm);
    CHECK(fakecudaAddF32(other, bufs[k], n, 0.5f, 0) == 0, "add");
  }
  fakecudaStreamDrain(other);
  for (int k = 0; k < K; k++) {
    float want = tri() - (float)nranks + (float)(nranks * k) + 0.5f;
    for (size_t i = 0; i < n; i += 997)
      CHECK(bufs[k][i] == want, "async op %d [%zu] = %f, want %f", k, i, bufs[k][i], want);
    OK(goncclRequestFree(reqs[k]), comm);
  }
  fakecudaStreamDrain(stream);
  for (int k = 0; k < K; k++) fakecudaFree(bufs[k]);
  fakecudaFree(scratch);

  /* WaitStream with waiter NULL is the host wait; on a host request it is just that. */
  float* b = dmalloc(8);
  goncclRequest_t r;
  CHECK(fakecudaFillF32(stream, b, 8, 1, 0) == 0, "fill");
  OK(goncclAllReduceAsync(b, b, 8, goncclFloat32, goncclSum, comm, stream, &r), comm);
  OK(goncclRequestWaitStream(r, NULL), comm);
  OK(goncclRequestFree(r), comm);
  fakecudaStreamDrain(stream);
  CHECK(b[7] == (float)nranks, "waitstream NULL: %f", b[7]);
  fakecudaFree(b);
  float h = 1, ho;
  OK(goncclAllReduceAsync(&h, &ho, 1, goncclFloat32, goncclSum, comm, NULL, &r), comm);
  OK(goncclRequestWaitStream(r, other), comm);
  CHECK(ho == (float)nranks, "host request waitstream: %f", ho);
  OK(goncclRequestFree(r), comm);
}

static void test_broadcast(goncclComm_t comm) {
  size_t n = 200003;
  float* buf = dmalloc(n);
  for (int root = 0; root < nranks; root++) {
    CHECK(fakecudaFillF32(stream, buf, n, rank == root ? (float)(root + 10) : -1.0f, SLOW_US) == 0, "fill");
    OK(goncclBroadcast(buf, buf, n, goncclFloat32, root, comm, stream), comm);
    fakecudaStreamDrain(stream);
    for (size_t i = 0; i < n; i += 101)
      CHECK(buf[i] == (float)(root + 10), "broadcast root %d [%zu] = %f", root, i, buf[i]);
  }
  fakecudaFree(buf);
}

static void test_allgather(goncclComm_t comm) {
  size_t n = 4097;
  float *send = dmalloc(n), *recv = dmalloc(n * nranks);
  CHECK(fakecudaFillF32(stream, send, n, (float)(rank * 3), SLOW_US) == 0, "fill");
  OK(goncclAllGather(send, recv, n, goncclFloat32, comm, stream), comm);
  fakecudaStreamDrain(stream);
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++)
      CHECK(recv[r * n + i] == (float)(r * 3), "allgather block %d [%zu] = %f", r, i, recv[r * n + i]);
  /* In place: the send buffer is this rank's block of recv; the other blocks hold
   * garbage the collective must overwrite. */
  CHECK(fakecudaFillF32(stream, recv, n * nranks, -7, 0) == 0, "fill");
  CHECK(fakecudaFillF32(stream, recv + rank * n, n, (float)(rank + 1), SLOW_US) == 0, "fill");
  OK(goncclAllGather(recv + rank * n, recv, n, goncclFloat32, comm, stream), comm);
  fakecudaStreamDrain(stream);
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++)
      CHECK(recv[r * n + i] == (float)(r + 1), "allgather in place block %d [%zu] = %f", r, i, recv[r * n + i]);
  fakecudaFree(send);
  fakecudaFree(recv);
}

static void test_more(goncclComm_t comm) {
  size_t n = 1001;
  float *send = dmalloc(n * nranks), *recv = dmalloc(n * nranks);
  /* reduce_scatter: block i of every rank's input is rank+i */
  for (int i = 0; i < nranks; i++)
    CHECK(fakecudaFillF32(stream, send + i * n, n, (float)(rank + i), i == 0 ? SLOW_US : 0) == 0, "fill");
  OK(goncclReduceScatter(send, recv, n, goncclFloat32, goncclSum, comm, stream), comm);
  fakecudaStreamDrain(stream);
  for (size_t i = 0; i < n; i++)
    CHECK(recv[i] == tri() - nranks + (float)(nranks * rank), "reduce_scatter [%zu] = %f", i, recv[i]);
  /* reduce to the last rank; recvbuff elsewhere must stay untouched */
  int root = nranks - 1;
  CHECK(fakecudaFillF32(stream, recv, n, -3, 0) == 0, "fill");
  CHECK(fakecudaFillF32(stream, send, n, (float)(rank + 1), SLOW_US) == 0, "fill");
  OK(goncclReduce(send, recv, n, goncclFloat32, goncclSum, root, comm, stream), comm);
  fakecudaStreamDrain(stream);
  for (size_t i = 0; i < n; i++)
    CHECK(recv[i] == (rank == root ? tri() : -3.0f), "reduce [%zu] = %f", i, recv[i]);
  /* alltoall: rank r sends value 100*r+j to rank j */
  for (int j = 0; j < nranks; j++)
    CHECK(fakecudaFillF32(stream, send + j * n, n, (float)(100 * rank + j), j == 0 ? SLOW_US : 0) == 0, "fill");
  OK(goncclAlltoAll(send, recv, n, goncclFloat32, comm, stream), comm);
  fakecudaStreamDrain(stream);
  for (int j = 0; j < nranks; j++)
    for (size_t i = 0; i < n; i++)
      CHECK(recv[j * n + i] == (float)(100 * j + rank), "alltoall block %d [%zu] = %f", j, i, recv[j * n + i]);
  /* gather to rank 0 */
  CHECK(fakecudaFillF32(stream, send, n, (float)(rank + 5), SLOW_US) == 0, "fill");
  OK(goncclGather(send, recv, n, goncclFloat32, 0, comm, stream), comm);
  fakecudaStreamDrain(stream);
  if (rank == 0)
    for (int j = 0; j < nranks; j++)
      CHECK(recv[j * n] == (float)(j + 5) && recv[j * n + n - 1] == (float)(j + 5), "gather block %d", j);
  /* alltoallv with a gap in recvbuff that must keep its device value: rank r sends one
   * element to every rank j, which stores it at element 2*r. */
  size_t sc[64], sd[64], rc[64], rd[64];
  for (int j = 0; j < nranks; j++) {
    sc[j] = 1;
    sd[j] = j;
    rc[j] = 1;
    rd[j] = 2 * j;
  }
  for (int j = 0; j < nranks; j++) CHECK(fakecudaFillF32(stream, send + j, 1, (float)(10 * rank + j), 0) == 0, "fill");
  CHECK(fakecudaFillF32(stream, recv, 2 * nranks, -9, SLOW_US) == 0, "fill");
  OK(goncclAlltoAllv(send, sc, sd, recv, rc, rd, goncclFloat32, comm, stream), comm);
  fakecudaStreamDrain(stream);
  for (int j = 0; j < nranks; j++) {
    CHECK(recv[2 * j] == (float)(10 * j + rank), "alltoallv from %d = %f", j, recv[2 * j]);
    if (j < nranks - 1) CHECK(recv[2 * j + 1] == -9, "alltoallv gap %d = %f", j, recv[2 * j + 1]);
  }
  OK(goncclBarrier(comm, stream), comm);
  fakecudaFree(send);
  fakecudaFree(recv);
}

static void test_bad(goncclComm_t comm) {
  float* good = dmalloc(16);
  /* A pointer CUDA does not know. */
  goncclResult_t r = goncclAllReduce((void*)0x1234, good, 16, goncclFloat32, goncclSum, comm, stream);
  CHECK(r == goncclInvalidArgument, "unknown pointer -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "CUDA_ERROR_INVALID_VALUE") && strstr(goncclGetLastError(comm), "sendbuff"),
        "message: %s", goncclGetLastError(comm));
  /* A freed one. */
  float* gone = dmalloc(16);
  fakecudaFree(gone);
  r = goncclBroadcast(good, gone, 16, goncclFloat32, 0, comm, stream);
  CHECK(r == goncclInvalidArgument, "freed pointer -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "recvbuff") && strstr(goncclGetLastError(comm), "CUDA_ERROR_INVALID_VALUE"),
        "message: %s", goncclGetLastError(comm));
  /* A buffer shorter than count: its last element is not device memory. */
  float* small = dmalloc(4);
  r = goncclAllReduce(good, small, 16, goncclFloat32, goncclSum, comm, stream);
  CHECK(r == goncclInvalidArgument, "short buffer -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "recvbuff") && strstr(goncclGetLastError(comm), "64 bytes"), "message: %s",
        goncclGetLastError(comm));
  fakecudaFree(small);
  /* A stream that is not one. */
  r = goncclAllReduce(good, good, 16, goncclFloat32, goncclSum, comm, (goncclStream_t)good);
  CHECK(r == goncclUnhandledCudaError, "bad stream -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "cuda: cuStreamGetCtx: CUDA_ERROR_INVALID_HANDLE"), "message: %s",
        goncclGetLastError(comm));
  /* Point-to-point with a stream is refused clearly. */
  r = goncclSend(good, 16, goncclFloat32, (rank + 1) % nranks, comm, stream);
  CHECK(r == goncclNotSupported, "send with stream -> %d", r);
  /* The communicator still works. */
  CHECK(fakecudaFillF32(stream, good, 16, 1, 0) == 0, "fill");
  OK(goncclAllReduce(good, good, 16, goncclFloat32, goncclSum, comm, stream), comm);
  fakecudaStreamDrain(stream);
  CHECK(good[15] == (float)nranks, "after errors: %f", good[15]);
  fakecudaFree(good);
}

/* A failed collective (ranks disagree on the count) fails on every rank, copies nothing
 * back, and leaves the pinned pool to be freed by goncclCommDestroy. Runs last: the
 * communicator is broken afterwards. */
static void test_failure(goncclComm_t comm) {
  size_t n = 1000 + 1000 * (size_t)rank;
  float *send = dmalloc(n), *recv = dmalloc(n);
  CHECK(fakecudaFillF32(stream, send, n, 1, 0) == 0, "fill");
  CHECK(fakecudaFillF32(stream, recv, n, -5, SLOW_US) == 0, "fill");
  goncclRequest_t req;
  OK(goncclAllReduceAsync(send, recv, n, goncclFloat32, goncclSum, comm, stream, &req), comm);
  goncclResult_t r = goncclRequestWaitStream(req, other);
  CHECK(r != goncclSuccess, "mismatched all_reduce succeeded");
  CHECK(strlen(goncclRequestErrorString(req)) > 0, "no message for %d", r);
  OK(goncclRequestFree(req), comm);
  fakecudaStreamDrain(stream);
  for (size_t i = 0; i < n; i += 99) CHECK(recv[i] == -5, "failed op wrote recvbuff[%zu] = %f", i, recv[i]);
  fakecudaFree(send);
  fakecudaFree(recv);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  CHECK(getenv("GONCCL_CUDA_LIBRARY") != NULL, "GONCCL_CUDA_LIBRARY must name the fake driver");
  dev = rank % 2;
  fakecudaSetDelay(0, 300);
  stream = fakecudaStreamCreate(dev);
  other = fakecudaStreamCreate(dev);

  goncclUniqueId id;
  share_id(argv[3], &id);
  goncclComm_t comm;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, 60000), NULL);

  test_allreduce(comm);
  test_async_wait_stream(comm);
  test_broadcast(comm);
  test_allgather(comm);
  test_more(comm);
  test_bad(comm);

  fakecudaCounters c;
  fakecudaGetCounters(&c);
  CHECK(c.host_live > 0, "the pinned pool should hold memory before destroy");
  CHECK(c.host_allocs < 40, "the pinned pool allocated %ld blocks: not reused", c.host_allocs);
  test_failure(comm);
  OK(goncclCommDestroy(comm), NULL);
  fakecudaStreamDrain(stream);
  fakecudaStreamDrain(other);
  fakecudaGetCounters(&c);
  CHECK(c.bad_access == 0, "%ld queued operations touched freed memory", c.bad_access);
  CHECK(c.host_races == 0, "%ld copies raced on pinned memory", c.host_races);
  CHECK(c.context_errors == 0, "%ld CUDA calls ran without the right context", c.context_errors);
  CHECK(c.host_live == 0 && c.host_frees == c.host_allocs, "pinned pool not freed: %ld live", c.host_live);
  CHECK(c.dtoh > 0 && c.htod > 0, "no copies ran");
  printf("rank %d: %d checks passed (%ld D2H, %ld H2D, %ld pinned blocks)\n", rank, checks, c.dtoh, c.htod,
         c.host_allocs);
  return 0;
}
