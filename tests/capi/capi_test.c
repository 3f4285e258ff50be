/*
 * A plain C program that uses gonccl through its public header only, no torch:
 * run one process per rank as
 *     capi_test RANK NRANKS ID_FILE
 * Rank 0 creates the unique id and writes it to ID_FILE; the others read it from there.
 * Every collective's result is checked against values computed here. Exit status 0
 * means every check passed.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#include "gonccl.h"
#include "test_harness.h"

static void test_allreduce(goncclComm_t comm) {
  size_t counts[] = {0, 1, 7, 1000003};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c];
    float* send = malloc((n + 1) * sizeof(float));
    float* recv = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) send[i] = (float)((rank + 1) * (int)(i % 97));
    OK(goncclAllReduce(send, recv, n, goncclFloat32, goncclSum, comm, NULL), comm);
    float tri = (float)(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < n; i++)
      CHECK(recv[i] == tri * (float)(i % 97), "allreduce sum n=%zu [%zu] = %f", n, i, recv[i]);
    /* in place, MAX */
    OK(goncclAllReduce(send, send, n, goncclFloat32, goncclMax, comm, NULL), comm);
    for (size_t i = 0; i < n; i++)
      CHECK(send[i] == (float)(nranks * (int)(i % 97)), "allreduce max in place [%zu]", i);
    free(send);
    free(recv);
  }
  /* int32 MIN, PROD and AVG; float64 AVG */
  int32_t iv[3] = {rank + 1, -(rank + 1), 10 * (rank + 1)};
  int32_t io[3];
  OK(goncclAllReduce(iv, io, 3, goncclInt32, goncclMin, comm, NULL), comm);
  CHECK(io[0] == 1 && io[1] == -nranks && io[2] == 10, "int32 min");
  OK(goncclAllReduce(iv, io, 1, goncclInt32, goncclProd, comm, NULL), comm);
  int32_t fact = 1;
  for (int r = 1; r <= nranks; r++) fact *= r;
  CHECK(io[0] == fact, "int32 prod %d != %d", io[0], fact);
  OK(goncclAllReduce(iv, io, 3, goncclInt32, goncclAvg, comm, NULL), comm);
  CHECK(io[2] == 10 * (nranks * (nranks + 1) / 2) / nranks, "int32 avg");
  double dv = rank, dout;
  OK(goncclAllReduce(&dv, &dout, 1, goncclFloat64, goncclAvg, comm, NULL), comm);
  CHECK(fabs(dout - (nranks - 1) / 2.0) < 1e-12, "float64 avg %f", dout);
}

static void test_broadcast(goncclComm_t comm) {
  size_t n = 300001;
  int64_t* buf = malloc(n * sizeof(int64_t));
  for (int root = 0; root < nranks; root++) {
    for (size_t i = 0; i < n; i++) buf[i] = rank == root ? (int64_t)i * 31 + root : -1;
    OK(goncclBroadcast(buf, buf, n, goncclInt64, root, comm, NULL), comm);
    for (size_t i = 0; i < n; i++)
      CHECK(buf[i] == (int64_t)i * 31 + root, "broadcast root %d [%zu] = %lld", root, i, (long long)buf[i]);
  }
  free(buf);
}

static void test_allgather(goncclComm_t comm) {
  size_t n = 4097;
  uint8_t* send = malloc(n);
  uint8_t* recv = malloc(n * nranks);
  for (size_t i = 0; i < n; i++) send[i] = (uint8_t)(rank * 7 + i);
  OK(goncclAllGather(send, recv, n, goncclUint8, comm, NULL), comm);
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++)
      CHECK(recv[r * n + i] == (uint8_t)(r * 7 + i), "allgather block %d [%zu]", r, i);
  /* in place: the send buffer is this rank's block of recv */
  memset(recv, 0, n * nranks);
  memcpy(recv + rank * n, send, n);
  OK(goncclAllGather(recv + rank * n, recv, n, goncclUint8, comm, NULL), comm);
  for (int r = 0; r < nranks; r++)
    for (size_t i = 0; i < n; i++)
      CHECK(recv[r * n + i] == (uint8_t)(r * 7 + i), "allgather in place block %d [%zu]", r, i);
  free(send);
  free(recv);
}

struct cb_state {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  goncclResult_t result;
};

static void on_done(void* arg, goncclResult_t result) {
  struct cb_state* s = arg;
  pthread_mutex_lock(&s->mu);
  s->calls++;
  s->result = result;
  pthread_cond_signal(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

static void test_async(goncclComm_t comm) {
  enum { N = 8, COUNT = 100000 };
  float* bufs[N];
  goncclRequest_t reqs[N];
  for (int k = 0; k < N; k++) {
    bufs[k] = malloc(COUNT * sizeof(float));
    for (int i = 0; i < COUNT; i++) bufs[k][i] = (float)(k + rank);
    OK(goncclAllReduceAsync(bufs[k], bufs[k], COUNT, goncclFloat32, goncclSum, comm, NULL, &reqs[k]), comm);
  }
  /* completion callback on the last request, wait on the rest */
  struct cb_state s = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, goncclInternalError};
  OK(goncclRequestOnComplete(reqs[N - 1], on_done, &s), comm);
  for (int k = 0; k < N - 1; k++) OK(goncclRequestWait(reqs[k], -1), comm);
  pthread_mutex_lock(&s.mu);
  while (s.calls == 0) pthread_cond_wait(&s.cv, &s.mu);
  pthread_mutex_unlock(&s.mu);
  CHECK(s.calls == 1 && s.result == goncclSuccess, "callback ran %d times, result %d", s.calls, s.result);
  int done = 0;
  OK(goncclRequestTest(reqs[N - 1], &done), comm);
  CHECK(done == 1, "test after completion");
  float sumr = (float)(nranks * (nranks - 1) / 2);
  for (int k = 0; k < N; k++) {
    for (int i = 0; i < COUNT; i++)
      CHECK(bufs[k][i] == (float)(k * nranks) + sumr, "async allreduce %d [%d]", k, i);
    OK(goncclRequestFree(reqs[k]), comm);
    free(bufs[k]);
  }
  goncclRequest_t b;
  OK(goncclBarrierAsync(comm, NULL, &b), comm);
  OK(goncclRequestWait(b, 30000), comm);
  OK(goncclRequestFree(b), comm);
}

static void test_bad_input(goncclComm_t comm) {
  float x = 1;
  goncclResult_t r = goncclAllReduce(&x, &x, 1, (goncclDataType_t)42, goncclSum, comm, NULL);
  CHECK(r == goncclInvalidArgument, "bad dtype -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "unknown data type 42") != NULL, "message: %s", goncclGetLastError(comm));
  r = goncclAllReduce(&x, &x, 1, goncclFloat32, (goncclRedOp_t)17, comm, NULL);
  CHECK(r == goncclInvalidArgument, "bad op -> %d", r);
  r = goncclAllReduce(NULL, &x, 1, goncclFloat32, goncclSum, comm, NULL);
  CHECK(r == goncclInvalidArgument, "NULL sendbuff -> %d", r);
  r = goncclAllReduce(&x, &x, (size_t)-1, goncclFloat32, goncclSum, comm, NULL);
  CHECK(r == goncclInvalidArgument, "overflowing count -> %d", r);
  r = goncclAllReduce(&x, &x, 1, goncclFloat32, goncclSum, NULL, NULL);
  CHECK(r == goncclInvalidArgument, "NULL comm -> %d", r);
  /* A stream means device buffers: without CUDA that is refused plainly; with CUDA a
   * host pointer is not device memory. */
  r = goncclAllReduce(&x, &x, 1, goncclFloat32, goncclSum, comm, (goncclStream_t)0x1);
  CHECK((r == goncclInvalidUsage && strstr(goncclGetLastError(comm), "stream given but CUDA is not available")) ||
            r == goncclInvalidArgument,
        "stream -> %d: %s", r, goncclGetLastError(comm));
  r = goncclBroadcast(&x, &x, 1, goncclFloat32, nranks, comm, NULL);
  CHECK(r == goncclInvalidArgument, "root out of range -> %d", r);
  CHECK(strlen(goncclGetErrorString(goncclTimeout)) > 0, "error string");
  r = goncclGetVersion(NULL);
  CHECK(r == goncclInvalidArgument, "NULL version -> %d", r);
}

/* Point to point: a ring of blocking sends and receives inside a group (large enough
 * that a send cannot finish before its receive is posted: without the group this order
 * would deadlock), any-source receives reporting their sender, a size mismatch, and
 * argument errors. */
static void test_p2p(goncclComm_t comm) {
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  size_t sizes[] = {1, 1 << 20};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    float* out = malloc(n * sizeof(float));
    float* in = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) out[i] = (float)(rank * 1000 + (int)(i % 513));
    OK(goncclGroupStart(), comm);
    OK(goncclGroupStart(), comm); /* groups nest */
    OK(goncclSend(out, n, goncclFloat32, next, comm, NULL), comm);
    OK(goncclGroupEnd(), comm);
    OK(goncclRecv(in, n, goncclFloat32, prev, comm, NULL), comm);
    OK(goncclGroupEnd(), comm);
    for (size_t i = 0; i < n; i++)
      CHECK(in[i] == (float)(prev * 1000 + (int)(i % 513)), "ring n=%zu [%zu] = %f", n, i, in[i]);
    free(out);
    free(in);
  }

  /* every other rank sends its rank to rank 0, which receives from any source */
  enum { M = 300000 }; /* ints: large enough to take the rendezvous path */
  int* msg = malloc(M * sizeof(int));
  if (rank == 0) {
    goncclRequest_t reqs[64];
    int** bufs = malloc(nranks * sizeof(int*));
    for (int i = 1; i < nranks; i++) {
      bufs[i] = malloc(M * sizeof(int));
      OK(goncclRecvAsync(bufs[i], M, goncclInt32, GONCCL_ANY_SOURCE, 5, comm, NULL, &reqs[i]), comm);
    }
    int seen = 0;
    for (int i = 1; i < nranks; i++) {
      OK(goncclRequestWait(reqs[i], 60000), comm);
      int src = -2;
      OK(goncclRequestSource(reqs[i], &src), comm);
      CHECK(src >= 1 && src < nranks && !(seen & (1 << src)), "any-source receive reported source %d", src);
      seen |= 1 << src;
      CHECK(bufs[i][0] == src && bufs[i][M - 1] == src * 7, "data of rank %d", src);
      OK(goncclRequestFree(reqs[i]), comm);
      free(bufs[i]);
    }
    free(bufs);
  } else {
    for (int i = 0; i < M; i++) msg[i] = i == M - 1 ? rank * 7 : rank;
    goncclRequest_t req;
    OK(goncclSendAsync(msg, M, goncclInt32, 0, 5, comm, NULL, &req), comm);
    OK(goncclRequestWait(req, 60000), comm);
    int src = -2;
    OK(goncclRequestSource(req, &src), comm);
    CHECK(src == 0, "send request source %d", src);
    OK(goncclRequestFree(req), comm);
  }
  free(msg);

  /* rank 1 sends S floats, rank 0 expects 2S: both learn of it (rendezvous-sized) */
  if (rank < 2) {
    enum { S = 50000 };
    float* buf = calloc(2 * S, sizeof(float));
    goncclRequest_t req;
    if (rank == 0)
      OK(goncclRecvAsync(buf, 2 * S, goncclFloat32, 1, 6, comm, NULL, &req), comm);
    else
      OK(goncclSendAsync(buf, S, goncclFloat32, 0, 6, comm, NULL, &req), comm);
    goncclResult_t r = goncclRequestWait(req, 60000);
    CHECK(r == goncclMismatch, "size mismatch -> %s", goncclGetErrorString(r));
    CHECK(strstr(goncclRequestErrorString(req), "expects 400000 bytes") != NULL, "message: %s",
          goncclRequestErrorString(req));
    OK(goncclRequestFree(req), comm);
    free(buf);
  }

  /* a collective's request has no source */
  goncclRequest_t b;
  OK(goncclBarrierAsync(comm, NULL, &b), comm);
  OK(goncclRequestWait(b, 60000), comm);
  int src = 0;
  OK(goncclRequestSource(b, &src), comm);
  CHECK(src == -1, "collective source %d", src);
  OK(goncclRequestFree(b), comm);

  float x = 0;
  goncclResult_t r = goncclSend(&x, 1, goncclFloat32, rank, comm, NULL);
  CHECK(r == goncclInvalidArgument, "send to self -> %d", r);
  r = goncclRecv(&x, 1, goncclFloat32, nranks, comm, NULL);
  CHECK(r == goncclInvalidArgument, "peer out of range -> %d", r);
  /* A stream with a host buffer: without CUDA the stream is refused, with CUDA the
   * buffer (not device memory). */
  r = goncclSend(&x, 1, goncclFloat32, next, comm, (goncclStream_t)0x1);
  CHECK(r == goncclInvalidUsage || r == goncclInvalidArgument, "stream with a host buffer -> %d", r);
  r = goncclGroupEnd();
  CHECK(r == goncclInvalidUsage, "unbalanced group end -> %d", r);
}

/* Reduce to every root (out of place, and in place at the root); other ranks' recvbuff
 * is never written, so a NULL one is fine. */
static void test_reduce(goncclComm_t comm) {
  size_t counts[] = {0, 1, 1000003};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c];
    int32_t* send = malloc((n + 1) * sizeof(int32_t));
    int32_t* recv = malloc((n + 1) * sizeof(int32_t));
    for (int root = 0; root < nranks; root++) {
      for (size_t i = 0; i < n; i++) send[i] = (rank + 1) * (int32_t)(i % 101);
      for (size_t i = 0; i < n; i++) recv[i] = -7;
      OK(goncclReduce(send, rank == root ? recv : NULL, n, goncclInt32, goncclSum, root, comm, NULL), comm);
      int32_t tri = nranks * (nranks + 1) / 2;
      for (size_t i = 0; i < n; i++) {
        CHECK(send[i] == (rank + 1) * (int32_t)(i % 101), "reduce changed sendbuff [%zu]", i);
        if (rank == root)
          CHECK(recv[i] == tri * (int32_t)(i % 101), "reduce n=%zu root %d [%zu] = %d", n, root, i, recv[i]);
      }
      /* in place at the root, MAX */
      OK(goncclReduce(send, send, n, goncclInt32, goncclMax, root, comm, NULL), comm);
      if (rank == root)
        for (size_t i = 0; i < n; i++)
          CHECK(send[i] == nranks * (int32_t)(i % 101), "reduce max in place [%zu] = %d", i, send[i]);
    }
    free(send);
    free(recv);
  }
  double dv = rank, dout = -1;
  OK(goncclReduce(&dv, &dout, 1, goncclFloat64, goncclAvg, nranks - 1, comm, NULL), comm);
  if (rank == nranks - 1) CHECK(fabs(dout - (nranks - 1) / 2.0) < 1e-12, "reduce avg %f", dout);
  else CHECK(dout == -1, "reduce wrote recvbuff off the root");
  float x = 1;
  goncclResult_t r = goncclReduce(&x, &x, 1, goncclFloat32, goncclSum, nranks, comm, NULL);
  CHECK(r == goncclInvalidArgument, "reduce root out of range -> %d", r);
}

/* Block i of the reduction lands on rank i; out of place keeps sendbuff, in place uses
 * recvbuff == sendbuff + rank*recvcount. */
static void test_reduce_scatter(goncclComm_t comm) {
  size_t counts[] = {0, 1, 7, 262147};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c], total = n * nranks;
    float* send = malloc((total + 1) * sizeof(float));
    float* recv = malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < total; i++) send[i] = (float)((rank + 1) * (int)(i % 89));
    OK(goncclReduceScatter(send, recv, n, goncclFloat32, goncclSum, comm, NULL), comm);
    float tri = (float)(nranks * (nranks + 1) / 2);
    for (size_t i = 0; i < n; i++) {
      size_t g = rank * n + i;
      CHECK(recv[i] == tri * (float)(g % 89), "reduce_scatter n=%zu [%zu] = %f", n, i, recv[i]);
    }
    for (size_t i = 0; i < total; i++)
      CHECK(send[i] == (float)((rank + 1) * (int)(i % 89)), "reduce_scatter changed sendbuff [%zu]", i);
    OK(goncclReduceScatter(send, send + rank * n, n, goncclFloat32, goncclAvg, comm, NULL), comm);
    for (size_t i = 0; i < n; i++) {
      size_t g = rank * n + i;
      CHECK(fabsf(send[g] - tri * (float)(g % 89) / nranks) < 1e-3f, "reduce_scatter avg in place [%zu] = %f", i, send[g]);
    }
    free(send);
    free(recv);
  }
}

/* Gather to and scatter from every root; the root's own block also in place. */
static void test_gather_scatter(goncclComm_t comm) {
  size_t n = 100003;
  int64_t* mine = malloc(n * sizeof(int64_t));
  int64_t* all = malloc(n * nranks * sizeof(int64_t));
  for (int root = 0; root < nranks; root++) {
    for (size_t i = 0; i < n; i++) mine[i] = (int64_t)rank << 40 | (int64_t)i;
    for (size_t i = 0; i < n * nranks; i++) all[i] = -1;
    OK(goncclGather(mine, rank == root ? all : NULL, n, goncclInt64, root, comm, NULL), comm);
    for (size_t i = 0; i < n * nranks; i++) {
      int64_t want = rank == root ? ((int64_t)(i / n) << 40 | (int64_t)(i % n)) : -1;
      CHECK(all[i] == want, "gather root %d [%zu] = %lld", root, i, (long long)all[i]);
    }
    /* in place at the root: sendbuff is the root's block of recvbuff */
    if (rank == root) {
      for (size_t i = 0; i < n * nranks; i++) all[i] = -1;
      memcpy(all + root * n, mine, n * sizeof(int64_t));
    }
    OK(goncclGather(rank == root ? all + root * n : mine, all, n, goncclInt64, root, comm, NULL), comm);
    if (rank == root)
      for (size_t i = 0; i < n * nranks; i++)
        CHECK(all[i] == ((int64_t)(i / n) << 40 | (int64_t)(i % n)), "gather in place [%zu]", i);

    /* scatter: the root sends block i (its gathered data shifted) to rank i */
    if (rank == root)
      for (size_t i = 0; i < n * nranks; i++) all[i] = all[i] + 5;
    for (size_t i = 0; i < n; i++) mine[i] = -1;
    OK(goncclScatter(rank == root ? all : NULL, mine, n, goncclInt64, root, comm, NULL), comm);
    for (size_t i = 0; i < n; i++)
      CHECK(mine[i] == ((int64_t)rank << 40 | (int64_t)i) + 5, "scatter root %d [%zu] = %lld", root, i,
            (long long)mine[i]);
    /* in place at the root: recvbuff is the root's block of sendbuff */
    OK(goncclScatter(all, rank == root ? all + root * n : mine, n, goncclInt64, root, comm, NULL), comm);
    if (rank == root)
      for (size_t i = 0; i < n; i++)
        CHECK(all[root * n + i] == ((int64_t)root << 40 | (int64_t)i) + 5, "scatter in place [%zu]", i);
  }
  free(mine);
  free(all);
}

/* Element (from, to, i) is unique, so a block delivered to the wrong place shows. */
static uint32_t a2a_value(int from, int to, size_t i) { return (uint32_t)from << 24 | (uint32_t)to << 16 | (uint32_t)(i & 0xffff); }

static void test_alltoall(goncclComm_t comm) {
  size_t counts[] = {0, 1, 65537};
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t n = counts[c], total = n * nranks;
    uint32_t* send = malloc((total + 1) * sizeof(uint32_t));
    uint32_t* recv = malloc((total + 1) * sizeof(uint32_t));
    for (int j = 0; j < nranks; j++)
      for (size_t i = 0; i < n; i++) send[j * n + i] = a2a_value(rank, j, i);
    OK(goncclAlltoAll(send, recv, n, goncclUint32, comm, NULL), comm);
    for (int j = 0; j < nranks; j++)
      for (size_t i = 0; i < n; i++)
        CHECK(recv[j * n + i] == a2a_value(j, rank, i), "alltoall n=%zu from %d [%zu] = %#x", n, j, i, recv[j * n + i]);
    /* in place, async */
    goncclRequest_t req;
    OK(goncclAlltoAllAsync(send, send, n, goncclUint32, comm, NULL, &req), comm);
    OK(goncclRequestWait(req, 60000), comm);
    OK(goncclRequestFree(req), comm);
    CHECK(memcmp(send, recv, total * sizeof(uint32_t)) == 0, "alltoall in place differs");
    free(send);
    free(recv);
  }
}

/* Uneven: rank i sends rank j (i + 2*j) % 5 * 1000 elements (zero for some pairs), with
 * the blocks laid out in reverse order and gaps between them. The count arrays are
 * clobbered right after the async call returns: the library must have copied them. */
static void test_alltoallv(goncclComm_t comm) {
  size_t* sc = malloc(nranks * sizeof(size_t));
  size_t* sd = malloc(nranks * sizeof(size_t));
  size_t* rc = malloc(nranks * sizeof(size_t));
  size_t* rd = malloc(nranks * sizeof(size_t));
  size_t send_len = 0, recv_len = 0;
  for (int j = nranks - 1; j >= 0; j--) {
    sc[j] = (size_t)((rank + 2 * j) % 5) * 1000;
    rc[j] = (size_t)((j + 2 * rank) % 5) * 1000;
    sd[j] = send_len;
    rd[j] = recv_len;
    send_len += sc[j] + 3;
    recv_len += rc[j] + 3;
  }
  uint32_t* send = malloc(send_len * sizeof(uint32_t));
  uint32_t* recv = malloc(recv_len * sizeof(uint32_t));
  for (int j = 0; j < nranks; j++)
    for (size_t i = 0; i < sc[j]; i++) send[sd[j] + i] = a2a_value(rank, j, i);
  for (size_t i = 0; i < recv_len; i++) recv[i] = 0xdeadbeef;
  size_t* want_rc = malloc(nranks * sizeof(size_t));
  size_t* want_rd = malloc(nranks * sizeof(size_t));
  memcpy(want_rc, rc, nranks * sizeof(size_t));
  memcpy(want_rd, rd, nranks * sizeof(size_t));
  goncclRequest_t req;
  OK(goncclAlltoAllvAsync(send, sc, sd, recv, rc, rd, goncclUint32, comm, NULL, &req), comm);
  memset(sc, 0xff, nranks * sizeof(size_t));
  memset(rc, 0xff, nranks * sizeof(size_t));
  OK(goncclRequestWait(req, 60000), comm);
  OK(goncclRequestFree(req), comm);
  for (int j = 0; j < nranks; j++) {
    for (size_t i = 0; i < want_rc[j]; i++)
      CHECK(recv[want_rd[j] + i] == a2a_value(j, rank, i), "alltoallv from %d [%zu] = %#x", j, i,
            recv[want_rd[j] + i]);
    for (size_t i = want_rc[j]; i < want_rc[j] + 3; i++) /* the gap after each block */
      CHECK(recv[want_rd[j] + i] == 0xdeadbeef, "alltoallv wrote past block %d", j);
  }
  /* the blocking form, with everything zero but the diagonal */
  for (int j = 0; j < nranks; j++) sc[j] = rc[j] = sd[j] = rd[j] = 0;
  sc[rank] = rc[rank] = 2;
  uint32_t one[2] = {7, 8}, back[2] = {0, 0};
  OK(goncclAlltoAllv(one, sc, sd, back, rc, rd, goncclUint32, comm, NULL), comm);
  CHECK(back[0] == 7 && back[1] == 8, "alltoallv own block");
  goncclResult_t r = goncclAlltoAllv(one, NULL, sd, back, rc, rd, goncclUint32, comm, NULL);
  CHECK(r == goncclInvalidArgument, "alltoallv NULL sendcounts -> %d", r);
  free(sc), free(sd), free(rc), free(rd), free(want_rc), free(want_rd), free(send), free(recv);
}

/* On a communicator of its own (the mismatch breaks it): rank 0 sends rank 1 one
 * element more than rank 1 expects; both ranks get goncclMismatch naming both counts. */
static void test_alltoallv_mismatch(const char* id_path) {
  char path[4096];
  snprintf(path, sizeof path, "%s.alltoallv", id_path);
  goncclUniqueId id;
  share_id(path, &id);
  goncclComm_t comm;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, 60000), NULL);
  size_t* counts = malloc(nranks * sizeof(size_t));
  size_t* rcounts = malloc(nranks * sizeof(size_t));
  size_t* displs = malloc(nranks * sizeof(size_t));
  for (int j = 0; j < nranks; j++) counts[j] = rcounts[j] = 4, displs[j] = 5 * (size_t)j;
  if (rank == 0) counts[1] = 5;
  int64_t* send = calloc(5 * nranks, sizeof(int64_t));
  int64_t* recv = calloc(5 * nranks, sizeof(int64_t));
  goncclResult_t r = goncclAlltoAllv(send, counts, displs, recv, rcounts, displs, goncclInt64, comm, NULL);
  CHECK(r != goncclSuccess, "mismatched alltoallv succeeded");
  /* Rank 1 (the receiver) always diagnoses it. Rank 0 does too with two ranks; with
   * more, rank 1 may shut its links before rank 0 reads its counts, and rank 0 then
   * reports losing rank 1 (naming both sides on every rank is the reliability work's). */
  if (rank == 1 || (rank == 0 && nranks == 2)) {
    CHECK(r == goncclMismatch, "alltoallv mismatch -> %s: %s", goncclGetErrorString(r), goncclGetLastError(comm));
    CHECK(strstr(goncclGetLastError(comm), "rank 0 sent 5 elements to rank 1, which expected 4") != NULL,
          "message: %s", goncclGetLastError(comm));
  } else if (rank == 0) {
    CHECK(strstr(goncclGetLastError(comm), "rank 1") != NULL, "message: %s", goncclGetLastError(comm));
  }
  OK(goncclCommAbort(comm), NULL);
  free(counts), free(rcounts), free(displs), free(send), free(recv);
}

/* On a communicator of its own (a refusal by one rank breaks the others'): ranks that
 * all refuse a call stay in step; then rank 1 alone refuses all_gather #3, and its ring
 * neighbours' all_gather fails at once with goncclMismatch, naming rank 1 and its
 * reason; the others' fails too, not at the timeout. */
static void test_refuse(const char* id_path) {
  char path[4096];
  snprintf(path, sizeof path, "%s.refuse", id_path);
  goncclUniqueId id;
  share_id(path, &id);
  goncclComm_t comm;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, 60000), NULL);
  goncclResult_t r = goncclCommRefuse(comm, goncclOpSendRecv, "not a collective");
  CHECK(r == goncclInvalidArgument, "refusing a send/recv -> %d", r);
  r = goncclCommRefuse(comm, goncclOpAllReduce, NULL);
  CHECK(r == goncclInvalidArgument, "NULL reason -> %d", r);
  OK(goncclCommRefuse(comm, goncclOpAllReduce, "gonccl: all_reduce: the same bad tensor on every rank"), comm);
  float x = (float)(rank + 1);
  OK(goncclAllReduce(&x, &x, 1, goncclFloat32, goncclSum, comm, NULL), comm);
  CHECK(x == (float)(nranks * (nranks + 1) / 2), "all_reduce after every rank refused #1: %f", x);
  float* buf = calloc((size_t)nranks, sizeof(float));
  if (rank == 1) {
    OK(goncclCommRefuse(comm, goncclOpAllGather, "gonccl: all_gather: my check failed"), comm);
  } else {
    time_t start = time(NULL);
    r = goncclAllGather(buf + rank, buf, 1, goncclFloat32, comm, NULL);
    CHECK(r != goncclSuccess, "an all_gather that rank 1 refused succeeded");
    CHECK(time(NULL) - start < 30, "the refused all_gather failed only after %lds", (long)(time(NULL) - start));
    if (rank == 0 || rank == 2) {
      CHECK(r == goncclMismatch, "refused all_gather -> %s: %s", goncclGetErrorString(r), goncclGetLastError(comm));
      CHECK(strstr(goncclGetLastError(comm), "rank 1 refused all_gather #3: all_gather: my check failed") != NULL,
            "message: %s", goncclGetLastError(comm));
    }
  }
  OK(goncclCommAbort(comm), NULL);
  free(buf);
}

/* One-sided windows: every rank puts its slot into the next rank's window and signals
 * it; the window (read through goncclWinMemory) must hold the previous rank's slot and
 * the initial values elsewhere. Same-host peers are mapped: writing through a peer's
 * mapping lands in its window. A put that does not fit, or of another type, fails. */
static void test_windows(goncclComm_t comm) {
  enum { SLOT = 3 };
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  size_t n = (size_t)SLOT * (size_t)nranks + 1;
  double* init = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) init[i] = -1;
  goncclWindow_t win;
  OK(goncclWinCreate(comm, &win), comm);
  OK(goncclWinRegister(win, init, n, goncclFloat64), comm);
  size_t count = 0;
  goncclDataType_t dt = goncclInt8;
  OK(goncclWinGetInfo(win, next, &count, &dt), comm);
  CHECK(count == n && dt == goncclFloat64, "window info %zu %d", count, (int)dt);
  goncclWinAccess_t access = goncclWinSeparate;
  OK(goncclWinGetAttr(win, next, &access), comm);
  CHECK(access == goncclWinUnified, "access to rank %d on this host: %d", next, (int)access);

  double mine[SLOT];
  for (int i = 0; i < SLOT; i++) mine[i] = rank * 10 + i;
  goncclRequest_t req;
  OK(goncclPutAsync(mine, SLOT, goncclFloat64, next, (size_t)SLOT * rank, win, &req), comm);
  OK(goncclRequestWait(req, 60000), comm);
  OK(goncclRequestFree(req), comm);
  OK(goncclSignal(next, win), comm);
  OK(goncclWaitSignalAsync(prev, win, &req), comm);
  OK(goncclRequestWait(req, 60000), comm);
  OK(goncclRequestFree(req), comm);
  void* p = NULL;
  size_t bytes = 0;
  OK(goncclWinMemory(win, rank, &p, &bytes, NULL), comm);
  CHECK(bytes == n * sizeof(double), "window of %zu bytes", bytes);
  const double* got = p;
  for (size_t i = 0; i < n; i++) {
    double want = (int)i / SLOT == prev && i < (size_t)SLOT * nranks ? prev * 10 + (int)i % SLOT : -1;
    CHECK(got[i] == want, "window[%zu] = %f, want %f", i, got[i], want);
  }

  OK(goncclBarrier(comm, NULL), comm); /* every rank has checked its window */
  /* through the mapping of next's window: its last element */
  goncclWinHold_t hold = 0;
  OK(goncclWinMemory(win, next, &p, &bytes, &hold), comm);
  ((double*)p)[n - 1] = 500 + rank;
  OK(goncclSignal(next, win), comm);
  OK(goncclWaitSignal(prev, win), comm);
  CHECK(got[n - 1] == 500 + prev, "last element %f, want %d", got[n - 1], 500 + prev);

  goncclResult_t res = goncclPut(mine, SLOT, goncclFloat64, next, n - 1, win);
  CHECK(res == goncclInvalidArgument, "put past the end -> %d", res);
  res = goncclPut(mine, 1, goncclFloat32, next, 0, win);
  CHECK(res == goncclMismatch, "put of another type -> %d", res);

  OK(goncclWinDeregister(win), comm);
  CHECK(((double*)p)[n - 1] == 500 + rank, "held mapping changed after deregister");
  OK(goncclWinHoldRelease(hold), comm);
  res = goncclWinHoldRelease(hold);
  CHECK(res == goncclInvalidUsage, "second release of a hold -> %d", res);
  OK(goncclWinFree(win), comm);
  free(init);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  int version = 0;
  OK(goncclGetVersion(&version), NULL);
  CHECK(version == GONCCL_VERSION_CODE, "version %d, header says %d", version, GONCCL_VERSION_CODE);

  goncclUniqueId id;
  share_id(argv[3], &id);
  goncclComm_t comm;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, 60000), NULL);
  int n = -1, r = -1;
  OK(goncclCommCount(comm, &n), comm);
  OK(goncclCommUserRank(comm, &r), comm);
  CHECK(n == nranks && r == rank, "count %d rank %d", n, r);

  test_allreduce(comm);
  test_broadcast(comm);
  test_allgather(comm);
  test_async(comm);
  test_p2p(comm);
  OK(goncclBarrier(comm, NULL), comm);
  test_bad_input(comm);
  test_reduce(comm);
  test_reduce_scatter(comm);
  test_gather_scatter(comm);
  test_alltoall(comm);
  test_alltoallv(comm);
  test_windows(comm);
  test_alltoallv_mismatch(argv[3]);
  test_refuse(argv[3]);
  OK(goncclCommDestroy(comm), NULL);
  float x = 0;
  goncclResult_t res = goncclAllReduce(&x, &x, 1, goncclFloat32, goncclSum, comm, NULL);
  CHECK(res == goncclInvalidUsage, "use after destroy -> %d", res);
  printf("rank %d: %d checks passed\n", rank, checks);
  return 0;
}
