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
 * Some bad-input cases (a freed pointer, a short buffer, a data pointer as a stream)
 * are FAKE-ONLY: they pass because the fake keeps exact, never-reused allocations
 * and checks stream handles; a real driver rounds allocations up, torch's caching
 * allocator keeps freed blocks mapped, and a bad handle may crash the driver. They
 * run only against the fake, not through realcuda.c (fake_driver()).
 * Ranks r and r+2 use the same device, as several ranks may share one GPU. Buffers of
 * a stream-ordered pool (cuMemAllocAsync, PyTorch's backend:cudaMallocAsync) freed on
 * the stream right after the collective must work too (test_pool_memory).
 *
 * The stream-ordering checks use the fake's legacy default stream (which does not wait
 * for non-blocking streams, like torch's), per-thread streams, streams whose copies
 * run late, and consumer kernels (fakecudaCheckF32) that count a stale read if they
 * run before the result is there: every consumer queued after a wait must see it.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fakecuda.h"
#include "gonccl.h"
#include "test_harness.h"

/* Slow enough that a collective that does not wait for it reads stale input. */
#define SLOW_US 30000

static int dev;
static void* stream; /* gonccl's stream */
static void* other;  /* a second stream of the same device, ordered with WaitStream */

/* Driver entry points of the fake the test calls itself (CUresult is an int). */
int cuCtxSetCurrent(void* ctx);
/* Defined only by tests/capi/realcuda.c, the hooks on a real driver: the number of GPUs,
 * which the test's devices wrap around. NULL against the fake. */
int realcudaDeviceCount(void) __attribute__((weak));
static int real_driver(void) { return realcudaDeviceCount != NULL; }
/* Whether the test's devices a and b are one GPU (on a real driver they wrap around). */
static int same_device(int a, int b) {
  return real_driver() ? a % realcudaDeviceCount() == b % realcudaDeviceCount() : a == b;
}
#define STREAM_LEGACY ((goncclStream_t)0x1)
#define STREAM_PER_THREAD ((goncclStream_t)0x2)
#define NON_BLOCKING 0x1
/* A delay per operation of gonccl's stream in the ordering tests: its copies run late. */
#define LATE_US 20000

/* A thread that never made a CUDA call has no current context (the CUDA runtime makes
 * one current only on its first call there, and torch's device guard skips cudaSetDevice
 * when the device asked is the one cudaGetDevice reports, 0 on a new thread): the
 * capture check csrc makes for the caller's current stream, cudaStreamLegacy, names the
 * device, whose primary context gonccl uses (goncclStreamCheck there fails with
 * CUDA_ERROR_INVALID_CONTEXT, which the fake counts as a context error). */
static goncclResult_t no_context_check_device;
static void* check_legacy_without_context(void* arg) {
  (void)arg;
  no_context_check_device = goncclStreamCheckDevice(STREAM_LEGACY, dev);
  return NULL;
}

static float* dmalloc(size_t n) {
  float* p = fakecudaMalloc(dev, (n ? n : 1) * sizeof(float));
  CHECK(p != NULL, "fakecudaMalloc");
  return p;
}

/* The communicator takes the device path (GONCCL_DEVICE_PATH=1, see main). */
static int device_path;
static int same_gpu; /* every rank on device 0 (CUDA_CAPI_TEST_ONE_DEVICE=1), GONCCL_DEVICE_PATH=model or samegpu: the same-GPU path */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
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

/* Memory of PyTorch's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync):
 * a stream-ordered pool, freed on the stream right after the collective, as that
 * allocator frees a tensor whose last use is queued there: by then every copy of the
 * operation must be on the stream (a copy queued later touches freed memory, which the
 * final bad_access check counts), and a consumer queued before the free sees the
 * result. The second round gets the same addresses back from the pool. CUDA IPC cannot
 * export pool memory: the same-GPU path moves it through its exchange buffers. */
int cuMemAllocAsync(unsigned long long* p, size_t n, void* stream);
int cuMemFreeAsync(unsigned long long p, void* stream);
static void test_pool_memory(goncclComm_t comm) {
  size_t n = 100000;
  for (int round = 0; round < 2; round++) {
    unsigned long long s = 0, r = 0;
    CHECK(cuMemAllocAsync(&s, n * sizeof(float), stream) == 0, "cuMemAllocAsync");
    CHECK(cuMemAllocAsync(&r, n * sizeof(float), stream) == 0, "cuMemAllocAsync");
    float *send = (float*)(uintptr_t)s, *recv = (float*)(uintptr_t)r;
    CHECK(fakecudaFillF32(stream, send, n, (float)(rank + 1), SLOW_US) == 0, "fill");
    OK(goncclAllReduce(send, recv, n, goncclFloat32, goncclSum, comm, stream), comm);
    CHECK(fakecudaCheckF32(stream, recv, n, tri(), 0) == 0, "check");
    CHECK(cuMemFreeAsync(s, stream) == 0, "cuMemFreeAsync");
    CHECK(cuMemFreeAsync(r, stream) == 0, "cuMemFreeAsync");
  }
  fakecudaStreamDrain(stream);
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

/* Whether the driver is the fake (tests/fakecuda), not realcuda.c over libcuda.so.1. */
static int fake_driver(void) { return !real_driver(); }

static void test_bad(goncclComm_t comm) {
  float* good = dmalloc(16);
  /* A pointer CUDA does not know. */
  goncclResult_t r = goncclAllReduce((void*)0x1234, good, 16, goncclFloat32, goncclSum, comm, stream);
  CHECK(r == goncclInvalidArgument, "unknown pointer -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "CUDA_ERROR_INVALID_VALUE") && strstr(goncclGetLastError(comm), "sendbuff"),
        "message: %s", goncclGetLastError(comm));
  /* A root that is not a rank, on either path. */
  r = goncclBroadcast(good, good, 16, goncclFloat32, -1, comm, stream);
  CHECK(r == goncclInvalidArgument, "root -1 -> %d", r);
  r = goncclReduce(good, good, 16, goncclFloat32, goncclSum, nranks, comm, stream);
  CHECK(r == goncclInvalidArgument, "root nranks -> %d", r);
  /* Said on stdout, so that the test that runs this on the fake can see they ran. */
  printf("rank %d: fake-only bad-input checks %s\n", rank, fake_driver() ? "ran" : "skipped (not the fake driver)");
  if (fake_driver()) {
    /* FAKE-ONLY: a freed pointer. A real driver may have it mapped still (or again). */
    float* gone = dmalloc(16);
    fakecudaFree(gone);
    r = goncclBroadcast(good, gone, 16, goncclFloat32, 0, comm, stream);
    CHECK(r == goncclInvalidArgument, "freed pointer -> %d", r);
    CHECK(strstr(goncclGetLastError(comm), "recvbuff") && strstr(goncclGetLastError(comm), "CUDA_ERROR_INVALID_VALUE"),
          "message: %s", goncclGetLastError(comm));
    /* FAKE-ONLY: a buffer shorter than count, whose last element the fake does not know.
     * gonccl asks which device owns a buffer's first and last byte: no bounds check. On
     * a real driver the end of a short buffer lies in the same rounded-up allocation. */
    float* small = dmalloc(4);
    r = goncclAllReduce(good, small, 16, goncclFloat32, goncclSum, comm, stream);
    CHECK(r == goncclInvalidArgument, "short buffer -> %d", r);
    CHECK(strstr(goncclGetLastError(comm), "recvbuff") && strstr(goncclGetLastError(comm), "64 bytes"), "message: %s",
          goncclGetLastError(comm));
    fakecudaFree(small);
    /* FAKE-ONLY: a stream that is not one (the fake checks handles; a driver may crash). */
    r = goncclAllReduce(good, good, 16, goncclFloat32, goncclSum, comm, (goncclStream_t)good);
    CHECK(r == goncclUnhandledCudaError, "bad stream -> %d", r);
    CHECK(strstr(goncclGetLastError(comm), "cuda: cuStreamGetCtx: CUDA_ERROR_INVALID_HANDLE"), "message: %s",
          goncclGetLastError(comm));
  }
  /* Memory of another device than the stream's (where there is another GPU). */
  if (same_device(7, dev)) {
    printf("rank %d: device 7 is this rank's GPU here: the other-device check is left out\n", rank);
  } else {
    float* far = fakecudaMalloc(7, 16 * sizeof(float));
    CHECK(far != NULL, "fakecudaMalloc");
    r = goncclAllReduce(far, far, 16, goncclFloat32, goncclSum, comm, stream);
    CHECK(r == goncclInvalidArgument, "buffer of device 7, stream of device %d -> %d", dev, r);
    char far_name[32];
    snprintf(far_name, sizeof far_name, "device %d", real_driver() ? 7 % realcudaDeviceCount() : 7);
    CHECK(strstr(goncclGetLastError(comm), "sendbuff") && strstr(goncclGetLastError(comm), far_name) &&
              strstr(goncclGetLastError(comm), "stream is on device"),
          "message: %s", goncclGetLastError(comm));
    fakecudaFree(far);
  }
  /* cudaStreamPerThread: on gonccl's threads it is another stream. */
  r = goncclAllReduce(good, good, 16, goncclFloat32, goncclSum, comm, STREAM_PER_THREAD);
  CHECK(r == goncclInvalidUsage, "cudaStreamPerThread -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "cudaStreamPerThread"), "message: %s", goncclGetLastError(comm));
  r = goncclSend(good, 16, goncclFloat32, (rank + 1) % nranks, comm, STREAM_PER_THREAD);
  CHECK(r == goncclInvalidUsage, "send on cudaStreamPerThread -> %d", r);
  CHECK(goncclStreamCheck(STREAM_PER_THREAD) == goncclInvalidUsage, "goncclStreamCheck(cudaStreamPerThread)");
  CHECK(goncclStreamCheck(STREAM_LEGACY) == goncclSuccess, "goncclStreamCheck(cudaStreamLegacy)");
  CHECK(goncclStreamCheck(NULL) == goncclInvalidArgument, "goncclStreamCheck(NULL)");
  {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, check_legacy_without_context, NULL) == 0, "pthread_create");
    pthread_join(th, NULL);
    CHECK(no_context_check_device == goncclSuccess,
          "goncclStreamCheckDevice(cudaStreamLegacy, %d) on a thread without a context -> %d", dev,
          no_context_check_device);
    CHECK(goncclStreamCheckDevice(STREAM_LEGACY, dev) == goncclSuccess, "goncclStreamCheckDevice(cudaStreamLegacy)");
    CHECK(goncclStreamCheckDevice(STREAM_LEGACY, -1) == goncclInvalidArgument, "goncclStreamCheckDevice(device -1)");
  }
  /* A stream under graph capture: refused before anything is queued on it. */
  void* cap = fakecudaStreamCreateWithFlags(dev, NON_BLOCKING);
  CHECK(fakecudaBeginCapture(cap) == 0, "begin capture");
  fakecudaCounters before;
  fakecudaGetCounters(&before);
  r = goncclAllReduce(good, good, 16, goncclFloat32, goncclSum, comm, cap);
  CHECK(r == goncclInvalidUsage, "stream under capture -> %d", r);
  CHECK(strstr(goncclGetLastError(comm), "captured into a CUDA graph"), "message: %s", goncclGetLastError(comm));
  CHECK(goncclStreamCheck(cap) == goncclInvalidUsage, "goncclStreamCheck(capturing)");
  fakecudaCounters after;
  fakecudaGetCounters(&after);
  CHECK(after.captured_ops == before.captured_ops, "%ld operations were queued into the capture",
        after.captured_ops - before.captured_ops);
  CHECK(fakecudaEndCapture(cap) == 0, "end capture");
  /* The communicator still works. */
  CHECK(fakecudaFillF32(stream, good, 16, 1, 0) == 0, "fill");
  OK(goncclAllReduce(good, good, 16, goncclFloat32, goncclSum, comm, stream), comm);
  fakecudaStreamDrain(stream);
  CHECK(good[15] == (float)nranks, "after errors: %f", good[15]);
  fakecudaFree(good);
}

/* Bug 1 of issue 13: the PyTorch backend's default stream is the legacy default
 * stream, which does not wait for gonccl's non-blocking stream. A consumer queued on it
 * after goncclRequestWaitStream(request, waiter) must see the result; gonccl's copies
 * run late, so a waiter that makes no GPU-side wait (NULL: the host wait only, which is
 * what the backend passed for torch's default stream) shows up as a stale read. Same
 * for the calling thread's per-thread default stream. */
static void test_default_stream_waiters(goncclComm_t comm) {
  void* g = fakecudaStreamCreateWithFlags(dev, NON_BLOCKING);
  CHECK(fakecudaStreamSetDelay(g, LATE_US) == 0, "stream delay");
  goncclStream_t waiters[] = {STREAM_LEGACY, STREAM_PER_THREAD};
  size_t n = 4096;
  float* x = dmalloc(n);
  for (int w = 0; w < 2; w++) {
    for (int round = 0; round < 3; round++) {
      float v = (float)(rank + 1 + 10 * round);
      CHECK(fakecudaFillF32(g, x, n, v, 0) == 0, "fill");
      goncclRequest_t req;
      OK(goncclAllReduceAsync(x, x, n, goncclFloat32, goncclSum, comm, g, &req), comm);
      OK(goncclRequestWaitStream(req, waiters[w]), comm);
      CHECK(fakecudaCheckF32(waiters[w], x, n, tri() + (float)(10 * round * nranks), 0) == 0, "check");
      OK(goncclRequestFree(req), comm);
      CHECK(fakecudaStreamDrain(waiters[w]) == 0, "drain");
    }
  }
  /* The legacy stream as the operation's stream (a C caller's default stream): the
   * copies, queued from gonccl's threads, go on the same legacy stream. */
  CHECK(fakecudaFillF32(STREAM_LEGACY, x, n, (float)(rank + 1), SLOW_US) == 0, "fill");
  OK(goncclAllReduce(x, x, n, goncclFloat32, goncclSum, comm, STREAM_LEGACY), comm);
  CHECK(fakecudaCheckF32(STREAM_LEGACY, x, n, tri(), 0) == 0, "check");
  CHECK(fakecudaStreamDrain(STREAM_LEGACY) == 0, "drain");
  CHECK(x[n - 1] == tri(), "all_reduce on the legacy stream: %f", x[n - 1]);
  fakecudaStreamDrain(g);
  fakecudaFree(x);
  fakecudaCounters c;
  fakecudaGetCounters(&c);
  CHECK(c.stale_reads == 0, "%ld consumers on a default stream read the result before it was there", c.stale_reads);
}

/* Bugs 2 and 3 of issue 13: the backend copies results out of a staging buffer on the
 * stream once an operation has completed (all_gather into a list). The next operation
 * may read those outputs, so its device->host copies must be queued after the copy-out,
 * however late the completion thread gets to it: goncclRequestHoldStream keeps the
 * next operation's stream work back until goncclRequestReleaseStream. */
static void test_hold_orders_copy_outs(goncclComm_t comm) {
  void* g = fakecudaStreamCreateWithFlags(dev, NON_BLOCKING);
  size_t n = 2048;
  float *send = dmalloc(n), *flat = dmalloc(n * nranks), *out = dmalloc(n);
  for (int round = 0; round < 3; round++) {
    CHECK(fakecudaFillF32(g, send, n, (float)rank, 0) == 0, "fill");
    CHECK(fakecudaFillF32(g, out, n, -1, 0) == 0, "fill");
    goncclRequest_t gather, reduce;
    OK(goncclAllGatherAsync(send, flat, n, goncclFloat32, comm, g, &gather), comm);
    OK(goncclRequestHoldStream(gather), comm);
    /* Issued before the copy-out below exists; it reads what the copy-out writes. */
    OK(goncclAllReduceAsync(out, out, n, goncclFloat32, goncclSum, comm, g, &reduce), comm);
    OK(goncclRequestWait(gather, -1), comm);
    usleep(50000); /* a completion thread that gets to it late */
    /* The "copy-out": a slow kernel writing the outputs (rank's value + 1). */
    CHECK(fakecudaFillF32(g, out, n, (float)(rank + 1), SLOW_US) == 0, "copy-out");
    OK(goncclRequestReleaseStream(gather), comm);
    OK(goncclRequestWaitStream(reduce, other), comm);
    CHECK(fakecudaCheckF32(other, out, n, tri(), 0) == 0, "check");
    fakecudaStreamDrain(other);
    CHECK(out[0] == tri() && out[n - 1] == tri(), "round %d: all_reduce after the copy-out = %f, want %f", round,
          out[0], tri());
    OK(goncclRequestFree(gather), comm);
    OK(goncclRequestFree(reduce), comm);
  }
  /* Freeing a held request releases it: the next operation runs. (One never released
   * fails the next operation at its deadline: go test ./cuda.) */
  goncclRequest_t held, next;
  OK(goncclAllReduceAsync(send, send, n, goncclFloat32, goncclSum, comm, g, &held), comm);
  OK(goncclRequestHoldStream(held), comm);
  OK(goncclRequestWait(held, -1), comm);
  OK(goncclAllReduceAsync(out, out, n, goncclFloat32, goncclSum, comm, g, &next), comm);
  OK(goncclRequestFree(held), comm);
  OK(goncclRequestWait(next, -1), comm);
  OK(goncclRequestFree(next), comm);
  fakecudaStreamDrain(g);
  fakecudaFree(send);
  fakecudaFree(flat);
  fakecudaFree(out);
}

/* Point-to-point on device buffers: a ring of sends and receives in a group, async
 * with a tag, and a receive from any source. A send sees a slow kernel queued before
 * it; a consumer queued after goncclRequestWaitStream sees the received data. */
static void test_p2p(goncclComm_t comm) {
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  size_t sizes[] = {7, 100000};
  for (size_t k = 0; k < 2; k++) {
    size_t n = sizes[k];
    float *sb = dmalloc(n), *rb = dmalloc(n);
    CHECK(fakecudaFillF32(stream, sb, n, (float)(rank + 1), SLOW_US) == 0, "fill");
    CHECK(fakecudaFillF32(stream, rb, n, -1, 0) == 0, "fill");
    OK(goncclGroupStart(), comm);
    OK(goncclSend(sb, n, goncclFloat32, next, comm, stream), comm);
    OK(goncclRecv(rb, n, goncclFloat32, prev, comm, stream), comm);
    OK(goncclGroupEnd(), comm);
    CHECK(fakecudaAddF32(stream, rb, n, 0.5f, 0) == 0, "add");
    fakecudaStreamDrain(stream);
    CHECK(rb[0] == (float)(prev + 1) + 0.5f && rb[n - 1] == (float)(prev + 1) + 0.5f, "ring n=%zu: got %f, want %f",
          n, rb[n - 1], (float)(prev + 1) + 0.5f);
    /* Async with a tag; the receive waited for by another stream. Every rank receives
     * first: on the device path each async operation runs on a stream of its own per
     * peer, after the work queued on `stream`, so the ring still progresses. */
    goncclRequest_t sr, rr;
    CHECK(fakecudaFillF32(stream, sb, n, (float)(100 + rank), SLOW_US) == 0, "fill");
    OK(goncclRecvAsync(rb, n, goncclFloat32, prev, 5, comm, stream, &rr), comm);
    OK(goncclSendAsync(sb, n, goncclFloat32, next, 5, comm, stream, &sr), comm);
    OK(goncclRequestWaitStream(rr, other), comm);
    CHECK(fakecudaCheckF32(other, rb, n, (float)(100 + prev), 0) == 0, "check");
    /* The send's buffer is free for reuse once a stream waits for the request. */
    OK(goncclRequestWaitStream(sr, other), comm);
    OK(goncclRequestFree(sr), comm);
    OK(goncclRequestFree(rr), comm);
    fakecudaStreamDrain(other);
    CHECK(rb[n / 2] == (float)(100 + prev), "async recv: %f", rb[n / 2]);
    fakecudaFree(sb);
    fakecudaFree(rb);
  }
  /* Rank 0 receives one message from every other rank, from any source (on the
   * device path, which refuses GONCCL_ANY_SOURCE, from each rank in turn). */
  float* b = dmalloc(3);
  if (rank == 0 && device_path) {
    goncclRequest_t r = NULL;
    CHECK(goncclRecvAsync(b, 3, goncclFloat32, GONCCL_ANY_SOURCE, 9, comm, stream, &r) == goncclInvalidUsage,
          "GONCCL_ANY_SOURCE on the device path was not refused");
    CHECK(strstr(goncclGetLastError(comm), "GONCCL_ANY_SOURCE") != NULL, "error: %s", goncclGetLastError(comm));
    for (int i = 1; i < nranks; i++) {
      OK(goncclRecv(b, 3, goncclFloat32, i, comm, stream), comm);
      fakecudaStreamDrain(stream);
      CHECK(b[2] == (float)(i * 7), "from %d got %f", i, b[2]);
    }
  } else if (rank == 0) {
    int seen = 0;
    for (int i = 1; i < nranks; i++) {
      goncclRequest_t r;
      OK(goncclRecvAsync(b, 3, goncclFloat32, GONCCL_ANY_SOURCE, 9, comm, stream, &r), comm);
      OK(goncclRequestWaitStream(r, stream), comm);
      int src = -1;
      OK(goncclRequestSource(r, &src), comm);
      OK(goncclRequestFree(r), comm);
      fakecudaStreamDrain(stream);
      CHECK(src >= 1 && src < nranks && b[2] == (float)(src * 7), "any source: from %d got %f", src, b[2]);
      seen |= 1 << src;
    }
    CHECK(seen == ((1 << nranks) - 2), "any source: saw ranks %#x", seen);
  } else {
    CHECK(fakecudaFillF32(stream, b, 3, (float)(rank * 7), SLOW_US) == 0, "fill");
    goncclRequest_t r;
    OK(goncclSendAsync(b, 3, goncclFloat32, 0, 9, comm, stream, &r), comm);
    OK(goncclRequestWaitStream(r, stream), comm);
    OK(goncclRequestFree(r), comm);
    fakecudaStreamDrain(stream);
  }
  fakecudaFree(b);
}

/* Point-to-point, alltoallv and barrier with messages of many chunks of the device
 * path's slots (the device run sets GONCCL_DEVICE_SCRATCH=1M): an exchange between
 * rank pairs in one group, one side receiving first; uneven alltoallv; on the device
 * path, a barrier that holds the streams, not the host. Also run on the staged path. */
static void test_p2p_large(goncclComm_t comm) {
  size_t n = 300000;
  int partner = rank ^ 1;
  if (partner < nranks) {
    float *sb = dmalloc(n), *rb = dmalloc(n + 16);
    CHECK(fakecudaFillF32(stream, sb, n, (float)(rank + 1), SLOW_US) == 0, "fill");
    CHECK(fakecudaFillF32(stream, rb, n + 16, -1, 0) == 0, "fill");
    OK(goncclGroupStart(), comm);
    if (rank % 2) OK(goncclRecv(rb, n, goncclFloat32, partner, comm, stream), comm);
    OK(goncclSend(sb, n, goncclFloat32, partner, comm, stream), comm);
    if (rank % 2 == 0) OK(goncclRecv(rb, n, goncclFloat32, partner, comm, stream), comm);
    OK(goncclGroupEnd(), comm);
    fakecudaStreamDrain(stream);
    for (size_t i = 0; i < n; i += 997)
      CHECK(rb[i] == (float)(partner + 1), "exchange [%zu] = %f, want %f", i, rb[i], (float)(partner + 1));
    CHECK(rb[n - 1] == (float)(partner + 1) && rb[n] == -1 && rb[n + 15] == -1, "exchange end/guard");
    fakecudaFree(sb);
    fakecudaFree(rb);
  }
  /* One group mixing host buffers (NULL stream: staged, started at once) with device
   * buffers (held until the group's end on the device path): a ring of each, the
   * messages of each kind in the same order on both sides, as the staged path matches
   * them by tag and order. */
  {
    int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
    size_t m = 70000;
    float *hs = malloc(m * sizeof(float)), *hr = malloc(m * sizeof(float));
    float *ds = dmalloc(m), *dr = dmalloc(m);
    CHECK(hs != NULL && hr != NULL, "malloc");
    for (size_t i = 0; i < m; i++) hs[i] = (float)(rank * 3 + 1), hr[i] = -1;
    CHECK(fakecudaFillF32(stream, ds, m, (float)(rank * 5 + 2), SLOW_US) == 0, "fill");
    CHECK(fakecudaFillF32(stream, dr, m, -1, 0) == 0, "fill");
    OK(goncclGroupStart(), comm);
    OK(goncclRecv(dr, m, goncclFloat32, next, comm, stream), comm);
    OK(goncclSend(ds, m, goncclFloat32, prev, comm, stream), comm);
    OK(goncclSend(hs, m, goncclFloat32, prev, comm, NULL), comm);
    OK(goncclRecv(hr, m, goncclFloat32, next, comm, NULL), comm);
    OK(goncclGroupEnd(), comm);
    fakecudaStreamDrain(stream);
    CHECK(hr[0] == (float)(next * 3 + 1) && hr[m - 1] == (float)(next * 3 + 1), "mixed group, host: %f", hr[m - 1]);
    CHECK(dr[0] == (float)(next * 5 + 2) && dr[m - 1] == (float)(next * 5 + 2), "mixed group, device: %f", dr[m - 1]);
    free(hs);
    free(hr);
    fakecudaFree(ds);
    fakecudaFree(dr);
  }
  /* alltoallv: rank r sends 1000*(j+1)+r elements of value 100*r+j to rank j. */
  size_t sc[64], sd[64], rc[64], rd[64], st = 0, rt = 0;
  for (int j = 0; j < nranks; j++) {
    sc[j] = 1000 * (size_t)(j + 1) + (size_t)rank;
    sd[j] = st;
    st += sc[j] + 5;
    rc[j] = 1000 * (size_t)(rank + 1) + (size_t)j;
    rd[j] = rt;
    rt += rc[j] + 5;
  }
  float *send = dmalloc(st), *recv = dmalloc(rt);
  CHECK(fakecudaFillF32(stream, recv, rt, -9, 0) == 0, "fill");
  for (int j = 0; j < nranks; j++)
    CHECK(fakecudaFillF32(stream, send + sd[j], sc[j], (float)(100 * rank + j), j == 0 ? SLOW_US : 0) == 0, "fill");
  OK(goncclAlltoAllv(send, sc, sd, recv, rc, rd, goncclFloat32, comm, stream), comm);
  fakecudaStreamDrain(stream);
  for (int j = 0; j < nranks; j++) {
    CHECK(recv[rd[j]] == (float)(100 * j + rank) && recv[rd[j] + rc[j] - 1] == (float)(100 * j + rank),
          "alltoallv from %d = %f", j, recv[rd[j] + rc[j] - 1]);
    CHECK(recv[rd[j] + rc[j]] == -9, "alltoallv gap after %d = %f", j, recv[rd[j] + rc[j]]);
  }
  fakecudaFree(send);
  fakecudaFree(recv);
  /* A barrier on the device path is flags on the streams: the call returns at once,
   * and a stream passes it once every rank's stream has reached it. The other ranks
   * hold their stream with a slow kernel before it, so rank 0's waits for them. */
  float* x = dmalloc(8);
  if (rank != 0) CHECK(fakecudaFillF32(stream, x, 8, 1, 10 * SLOW_US) == 0, "fill");
  double t0 = now_ms();
  OK(goncclBarrier(comm, stream), comm);
  double call = now_ms() - t0;
  fakecudaStreamDrain(stream);
  double passed = now_ms() - t0;
  if (device_path) {
    CHECK(call < 5 * SLOW_US / 1000.0, "device-path barrier waited %.1f ms on the host", call);
    if (rank == 0 && nranks > 1)
      CHECK(passed > 5 * SLOW_US / 1000.0, "rank 0's stream passed the barrier after %.1f ms, before the others' did",
            passed);
  }
  fakecudaFree(x);
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
  goncclResult_t r = goncclAllReduceAsync(send, recv, n, goncclFloat32, goncclSum, comm, stream, &req);
  if (same_gpu) {
    /* The same-GPU path compares the ranks' operations before it enqueues anything. */
    CHECK(r != goncclSuccess, "mismatched all_reduce succeeded");
    CHECK(strstr(goncclGetLastError(comm), "different operations") != NULL, "error: %s", goncclGetLastError(comm));
  } else {
    OK(r, comm);
    r = goncclRequestWaitStream(req, other);
    CHECK(r != goncclSuccess, "mismatched all_reduce succeeded");
    CHECK(strlen(goncclRequestErrorString(req)) > 0, "no message for %d", r);
    OK(goncclRequestFree(req), comm);
  }
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
  /* Every rank on device 0: asked for, or on a real driver with one GPU, where the
   * test's devices 0 and 1 would be that one GPU anyway (the ranks share it, and take
   * the paths ranks sharing a GPU take). */
  const char* one = getenv("CUDA_CAPI_TEST_ONE_DEVICE");
  int one_device = (one != NULL && strcmp(one, "1") == 0) || (real_driver() && realcudaDeviceCount() == 1);
  dev = one_device ? 0 : rank % 2;
  /* The device path is taken when asked for (GONCCL_DEVICE_PATH=1), and under
   * GONCCL_DEVICE_PATH=model or samegpu when no two ranks share a device (rank r is on
   * device r % 2: 2 ranks at most); never by default (auto: the GPU check has proven
   * only the staged path), with GONCCL_DEVICE_PATH=0 or GONCCL_P2P_DISABLE=1, or when the
   * fake's devices cannot map each other's memory (FAKECUDA_NO_PEER): then every rank
   * stages. Ranks all on one device take the same-GPU path for all_reduce, all_gather,
   * reduce_scatter and broadcast under model (its cost model's choice at every size) and
   * under samegpu (forced), and stage the rest. */
  const char* want_device = getenv("GONCCL_DEVICE_PATH");
  const char* p2p_off = getenv("GONCCL_P2P_DISABLE");
  int forced = want_device != NULL && strcmp(want_device, "1") == 0;
  int chooses = want_device != NULL && (strcmp(want_device, "model") == 0 || strcmp(want_device, "samegpu") == 0);
  device_path = (forced || (chooses && nranks <= 2)) && !(p2p_off != NULL && strcmp(p2p_off, "1") == 0) &&
                getenv("FAKECUDA_NO_PEER") == NULL;
  if (one_device && nranks > 1) { /* every rank on device 0 */
    same_gpu = chooses && !(p2p_off != NULL && strcmp(p2p_off, "1") == 0);
    device_path = forced && !(p2p_off != NULL && strcmp(p2p_off, "1") == 0);
  }
  /* The default streams resolve against the calling thread's current context. */
  CHECK(cuCtxSetCurrent(fakecudaContext(dev)) == 0, "cuCtxSetCurrent");
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
  test_default_stream_waiters(comm);
  test_hold_orders_copy_outs(comm);
  test_p2p(comm);
  test_p2p_large(comm);
  test_pool_memory(comm);
  test_bad(comm);

  fakecudaCounters c;
  fakecudaGetCounters(&c);
  CHECK(c.primary_retained == 1, "the pinned pool holds %ld references on primary contexts, want 1",
        c.primary_retained);
  /* On the device path every operation of this test stays on the GPU. */
  CHECK(device_path || c.host_live > 0, "the pinned pool should hold memory before destroy");
  CHECK(c.host_allocs < 40, "the pinned pool allocated %ld blocks: not reused", c.host_allocs);
  /* On the device path the call returns once enqueued, so the mismatch is reported
   * later, by goncclCommGetAsyncError: cuda_devfault_test.c. */
  if (!device_path) test_failure(comm);
  OK(goncclCommDestroy(comm), NULL);
  fakecudaStreamDrain(stream);
  fakecudaStreamDrain(other);
  fakecudaGetCounters(&c);
  CHECK(c.bad_access == 0, "%ld queued operations touched freed memory", c.bad_access);
  CHECK(c.host_races == 0, "%ld copies raced on pinned memory", c.host_races);
  CHECK(c.context_errors == 0, "%ld CUDA calls ran without the right context", c.context_errors);
  CHECK(c.host_live == 0 && c.host_frees == c.host_allocs, "pinned pool not freed: %ld live", c.host_live);
  /* The device path's async sends and receives ran on gonccl's own streams, which keep
   * their device's primary context for the life of the process (goncclStreamAcquire's). */
  CHECK(c.primary_retained == device_path, "%ld primary context references left after destroy", c.primary_retained);
  CHECK(c.stale_reads == 0, "%ld consumers read a result before it was there", c.stale_reads);
  /* On the device path no data of this test goes through host memory: nothing is copied
   * back to the device. (Copies to the host do run: the failure watcher reads this rank's
   * scratch header when an operation stays on the GPU longer than 20 ms, as the fake's
   * delays make many do.) */
  if (device_path)
    CHECK(c.htod == 0, "device path: %ld H2D copies ran (and %ld D2H)", c.htod, c.dtoh);
  else
    CHECK(c.dtoh > 0 && c.htod > 0, "no copies ran");
  printf("rank %d: %d checks passed (%ld D2H, %ld H2D, %ld pinned blocks)\n", rank, checks, c.dtoh, c.htod,
         c.host_allocs);
  return 0;
}
