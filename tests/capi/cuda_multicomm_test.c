/*
 * Several communicators on one device in one process, through the C ABI, against the
 * strict fake CUDA driver (tests/fakecuda): what the PyTorch backend does when a program
 * has more than one process group, which crashed every such test on the first real GPU.
 * Run one process per rank (all ranks on device 0, as ranks sharing one GPU):
 *     GONCCL_CUDA_LIBRARY=/path/libfakecuda.so cuda_multicomm_test RANK NRANKS DIR
 *
 * Per process, like torch: the runtime's reference on the primary context; the
 * communicators' streams taken from torch's 32-stream round-robin pool
 * (fakecudaPoolStream) with user code taking the others in between, so that all three
 * communicators get the same stream, as two backends of the backend do once the pool
 * wraps; a world communicator over the N ranks, one over ranks 1..N-1 and a one-rank
 * one. Every operation is held (goncclRequestHoldStream) and its copy-out is queued on
 * the stream by a completion thread of its communicator after the operation has
 * finished, then released, as csrc's completion threads do. Then: operations of
 * different communicators chained through one buffer on the shared stream (each must see
 * the previous one's copy-out); two threads issuing on two communicators at once; the
 * subset communicator destroyed while world operations are in flight; world operations
 * after it. The fake aborts (FAULT) or dies of SIGSEGV on a destroyed event, freed
 * pinned memory or a reset context; values and counters are checked at the end.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fakecuda.h"
#include "gonccl.h"
#include "test_harness.h"

int cuCtxSetCurrent(void* ctx);

#define DEV 0
#define N_ELEMS 4096
#define COPY_OUT_DELAY_US 20000 /* the completion thread's latency before the copy-out */
#define MAXJOBS 256

/* A completion thread: for each job, waits for the request, queues the copy-out (+1 on
 * out) on the stream, then releases the hold. */
typedef struct {
  goncclRequest_t req;
  float* out;
  size_t n;
  void* stream;
  volatile int done;
  goncclResult_t rc;
} job;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job* q[MAXJOBS];
  int head, tail, stop;
  pthread_t thread;
} copier;

static void* copier_run(void* arg) {
  copier* c = arg;
  for (;;) {
    pthread_mutex_lock(&c->mu);
    while (c->head == c->tail && !c->stop) pthread_cond_wait(&c->cv, &c->mu);
    if (c->head == c->tail) {
      pthread_mutex_unlock(&c->mu);
      return NULL;
    }
    job* j = c->q[c->head++ % MAXJOBS];
    pthread_mutex_unlock(&c->mu);
    j->rc = goncclRequestWait(j->req, -1);
    usleep(COPY_OUT_DELAY_US);
    if (j->rc == goncclSuccess) CHECK(fakecudaAddF32(j->stream, j->out, j->n, 1, 0) == 0, "copy-out");
    CHECK(goncclRequestReleaseStream(j->req) == goncclSuccess, "release");
    __atomic_store_n(&j->done, 1, __ATOMIC_SEQ_CST);
  }
}

static void copier_start(copier* c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  CHECK(pthread_create(&c->thread, NULL, copier_run, c) == 0, "pthread_create");
}

static void copier_stop(copier* c) {
  pthread_mutex_lock(&c->mu);
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  pthread_join(c->thread, NULL);
}

/* issue_sum: an async in-place-or-not all_reduce sum of send into recv, held, with its
 * copy-out handed to c. */
static job* issue_sum(copier* c, goncclComm_t comm, void* stream, float* send, float* recv) {
  job* j = calloc(1, sizeof *j);
  j->out = recv;
  j->n = N_ELEMS;
  j->stream = stream;
  OK(goncclAllReduceAsync(send, recv, N_ELEMS, goncclFloat32, goncclSum, comm, stream, &j->req), comm);
  OK(goncclRequestHoldStream(j->req), comm);
  pthread_mutex_lock(&c->mu);
  c->q[c->tail++ % MAXJOBS] = j;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  return j;
}

static void finish(job* j, goncclComm_t comm) {
  while (!__atomic_load_n(&j->done, __ATOMIC_SEQ_CST)) usleep(200);
  CHECK(j->rc == goncclSuccess, "operation failed: %s", goncclRequestErrorString(j->req));
  OK(goncclRequestFree(j->req), comm);
  free(j);
}

static float* dfill(void* stream, float v) {
  float* p = fakecudaMalloc(DEV, N_ELEMS * sizeof(float));
  CHECK(p != NULL, "fakecudaMalloc");
  CHECK(fakecudaFillF32(stream, p, N_ELEMS, v, 0) == 0, "fill");
  return p;
}

static void expect(void* stream, const float* p, float want, const char* what, int k) {
  fakecudaStreamDrain(stream);
  for (size_t i = 0; i < N_ELEMS; i += 511)
    CHECK(p[i] == want, "%s (round %d): [%zu] = %f, want %f", what, k, i, p[i], want);
}

/* The unique id of a communicator: its writer creates it, the others read it. */
static void comm_id(const char* dir, const char* name, int writer, goncclUniqueId* id) {
  char path[2048];
  CHECK(strlen(dir) + strlen(name) + 2 <= sizeof path, "directory name too long: %s", dir);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int saved = rank;
  rank = rank == writer ? 0 : 1; /* share_id writes on "rank 0" */
  share_id(path, id);
  rank = saved;
}

static goncclComm_t world, sub, solo;
static void* stream;
static int in_sub;
static copier cw, cs, c1;
static float tri;

/* Operations of three communicators chained through buffers on one stream. */
static void test_chain(void) {
  int m = nranks - 1; /* members of sub */
  for (int k = 0; k < 6; k++) {
    float* a = dfill(stream, (float)(rank + 1 + k));
    float* b = dfill(stream, -1);
    float* c = dfill(stream, -1);
    job* ja = issue_sum(&cw, world, stream, a, a);
    job* jb = in_sub ? issue_sum(&cs, sub, stream, a, b) : issue_sum(&c1, solo, stream, a, b);
    job* jc = issue_sum(&c1, solo, stream, b, c);
    finish(ja, world);
    finish(jb, in_sub ? sub : solo);
    finish(jc, solo);
    float av = tri + (float)(nranks * k) + 1;
    float bv = (in_sub ? (float)m * av : av) + 1;
    expect(stream, a, av, "world all_reduce then its copy-out", k);
    expect(stream, b, bv, "the next communicator's all_reduce of that result", k);
    expect(stream, c, bv + 1, "the one-rank communicator's all_reduce after it", k);
    fakecudaFree(a);
    fakecudaFree(b);
    fakecudaFree(c);
  }
}

/* Two threads issuing on two communicators at once. */
static void* solo_loop(void* arg) {
  (void)arg;
  for (int k = 0; k < 20; k++) {
    float* x = dfill(stream, (float)k);
    job* j = issue_sum(&c1, solo, stream, x, x);
    finish(j, solo);
    expect(stream, x, (float)k + 1, "one-rank all_reduce from a second thread", k);
    fakecudaFree(x);
  }
  return NULL;
}

static void test_threads(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, solo_loop, NULL) == 0, "pthread_create");
  for (int k = 0; k < 20; k++) {
    float* x = dfill(stream, (float)(rank + k));
    job* j = issue_sum(&cw, world, stream, x, x);
    finish(j, world);
    expect(stream, x, tri - (float)nranks + (float)(nranks * k) + 1, "world all_reduce beside a thread", k);
    fakecudaFree(x);
  }
  pthread_join(t, NULL);
}

/* The subset communicator destroyed while world operations are in flight. */
static void test_destroy_sub(void) {
  enum { K = 4 };
  float* xs[K];
  job* js[K];
  for (int k = 0; k < K; k++) {
    xs[k] = dfill(stream, (float)(rank + k));
    js[k] = issue_sum(&cw, world, stream, xs[k], xs[k]);
  }
  if (in_sub) {
    copier_stop(&cs);
    OK(goncclCommDestroy(sub), NULL);
  }
  for (int k = 0; k < K; k++) finish(js[k], world);
  for (int k = 0; k < K; k++) {
    expect(stream, xs[k], tri - (float)nranks + (float)(nranks * k) + 1, "world all_reduce across destroy", k);
    fakecudaFree(xs[k]);
  }
  for (int k = 0; k < 4; k++) {
    float* x = dfill(stream, (float)(rank + 10 * k));
    job* j = issue_sum(&cw, world, stream, x, x);
    finish(j, world);
    expect(stream, x, tri - (float)nranks + (float)(10 * nranks * k) + 1, "world all_reduce after destroy", k);
    fakecudaFree(x);
  }
}

/* Streams of gonccl's own (goncclStreamAcquire), what the PyTorch backend runs on instead
 * of a pool stream: no one else's, reused once given back, and still valid after the
 * runtime's teardown, as gonccl keeps the primary context. */
static void test_own_streams(void) {
  goncclStream_t a = NULL, b = NULL, again = NULL;
  OK(goncclStreamAcquire(DEV, &a), NULL);
  OK(goncclStreamAcquire(DEV, &b), NULL);
  CHECK(a != NULL && b != NULL && a != b, "two acquired streams: %p and %p", a, b);
  for (int i = 0; i < 32; i++) CHECK(fakecudaPoolStream(DEV) != a, "an acquired stream is a pool stream");
  goncclComm_t one;
  goncclUniqueId id;
  OK(goncclGetUniqueId(&id), NULL);
  OK(goncclCommInitRankTimeout(&one, 1, id, 0, 60000), NULL);
  copier c;
  copier_start(&c);
  float* x = dfill(a, 3);
  finish(issue_sum(&c, one, a, x, x), one);
  expect(a, x, 4, "one-rank all_reduce on an acquired stream", 0);
  copier_stop(&c);
  OK(goncclCommDestroy(one), NULL);
  /* The runtime's teardown (at exit): gonccl's reference keeps the context and its
   * stream alive (the fake faults on a stream of a reset context). */
  CHECK(fakecudaRuntimeRelease(DEV) == 0, "runtime release");
  fakecudaCounters cnt;
  fakecudaGetCounters(&cnt);
  CHECK(cnt.primary_resets == 0, "the primary context was reset under gonccl's own stream");
  CHECK(fakecudaFillF32(a, x, N_ELEMS, 5, 0) == 0, "fill on an acquired stream after the runtime's teardown");
  expect(a, x, 5, "a kernel on an acquired stream after the runtime's teardown", 0);
  fakecudaFree(x);
  OK(goncclStreamRelease(a), NULL);
  CHECK(goncclStreamRelease(a) == goncclInvalidUsage, "a stream given back twice was accepted");
  CHECK(goncclStreamRelease(fakecudaPoolStream(DEV)) == goncclInvalidUsage, "a pool stream was accepted");
  OK(goncclStreamAcquire(DEV, &again), NULL);
  CHECK(again == a, "a stream given back was not reused (%p, want %p)", again, a);
  OK(goncclStreamRelease(again), NULL);
  OK(goncclStreamRelease(b), NULL);
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK NRANKS DIR\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  CHECK(nranks >= 2, "needs 2 ranks or more");
  CHECK(getenv("GONCCL_CUDA_LIBRARY") != NULL, "GONCCL_CUDA_LIBRARY must name the fake driver");
  tri = (float)(nranks * (nranks + 1) / 2);
  in_sub = rank >= 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  fakecudaSetDelay(0, 300);

  /* torch: the runtime's reference, then streams from the pool for the backends, the
   * user's code taking pool streams in between, so the pool wraps. */
  CHECK(fakecudaRuntimeInit(DEV) == 0, "runtime init");
  CHECK(cuCtxSetCurrent(fakecudaContext(DEV)) == 0, "cuCtxSetCurrent");
  stream = fakecudaPoolStream(DEV);
  for (int i = 0; i < 31; i++) fakecudaPoolStream(DEV);
  CHECK(fakecudaPoolStream(DEV) == stream, "the pool of 32 streams should have wrapped");

  goncclUniqueId id;
  comm_id(argv[3], "world", 0, &id);
  OK(goncclCommInitRankTimeout(&world, nranks, id, rank, 60000), NULL);
  if (in_sub) {
    comm_id(argv[3], "sub", 1, &id);
    OK(goncclCommInitRankTimeout(&sub, nranks - 1, id, rank - 1, 60000), NULL);
  }
  OK(goncclGetUniqueId(&id), NULL);
  OK(goncclCommInitRankTimeout(&solo, 1, id, 0, 60000), NULL);
  copier_start(&cw);
  copier_start(&c1);
  if (in_sub) copier_start(&cs);

  test_chain();
  printf("rank %d: chain ok\n", rank);
  test_threads();
  printf("rank %d: threads ok\n", rank);
  test_destroy_sub();
  printf("rank %d: destroy ok\n", rank);

  copier_stop(&c1);
  OK(goncclCommDestroy(solo), NULL);
  copier_stop(&cw);
  OK(goncclCommDestroy(world), NULL);
  fakecudaStreamDrain(stream);
  fakecudaCounters c;
  fakecudaGetCounters(&c);
  CHECK(c.bad_access == 0, "%ld queued operations touched freed memory", c.bad_access);
  CHECK(c.context_errors == 0, "%ld CUDA calls ran without the right context", c.context_errors);
  CHECK(c.host_live == 0 && c.host_frees == c.host_allocs, "pinned pools not freed: %ld live", c.host_live);
  CHECK(c.primary_retained == 0, "%ld primary context references left after destroy", c.primary_retained);
  CHECK(c.primary_resets == 0, "the primary context was reset %ld times under the runtime", c.primary_resets);
  CHECK(c.stale_reads == 0, "%ld consumers read a result before it was there", c.stale_reads);
  test_own_streams();
  fakecudaGetCounters(&c);
  printf("rank %d: %d checks passed (%ld D2H, %ld H2D, %ld pinned blocks)\n", rank, checks, c.dtoh, c.htod,
         c.host_allocs);
  return 0;
}
