/*
 * Bad input at every door of the C ABI: each call below is wrong in one way, and must
 * return the documented error code (never crash, never hang) with a message that names
 * the problem, and leave the communicator usable. Run one process per rank:
 *     bad_input_test RANK NRANKS ID_FILE
 * Exit status 0 means every check passed.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gonccl.h"
#include "test_harness.h"

/* EXPECT: call returns want, and the last error (of comm, or the process's) contains
 * text. */
#define EXPECT(call, comm, want, text)                                                      \
  do {                                                                                      \
    goncclResult_t r_ = (call);                                                             \
    const char* m_ = goncclGetLastError(comm);                                              \
    CHECK(r_ == (want), "%s -> %d (%s), want %d; last error: %s", #call, r_,                \
          goncclGetErrorString(r_), (want), m_);                                            \
    CHECK(m_ != NULL && strstr(m_, (text)) != NULL, "%s: last error \"%s\" lacks \"%s\"", \
          #call, m_ ? m_ : "(null)", (text));                                               \
  } while (0)

static void test_error_strings(void) {
  const goncclResult_t known[] = {goncclSuccess, goncclUnhandledCudaError, goncclSystemError,
                                  goncclInternalError, goncclInvalidArgument, goncclInvalidUsage,
                                  goncclRemoteError, goncclInProgress, goncclTimeout,
                                  goncclMismatch, goncclAborted, goncclNotSupported};
  const char* unknown = goncclGetErrorString((goncclResult_t)99);
  CHECK(unknown && strstr(unknown, "unknown"), "code 99 -> \"%s\"", unknown ? unknown : "(null)");
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    const char* s = goncclGetErrorString(known[i]);
    CHECK(s && *s && strcmp(s, unknown) != 0, "code %d -> \"%s\"", known[i], s ? s : "(null)");
    for (size_t j = 0; j < i; j++)
      CHECK(strcmp(s, goncclGetErrorString(known[j])) != 0, "codes %d and %d share a message", known[i], known[j]);
  }
  const int others[] = {8, 99, 104, -1, INT_MAX, INT_MIN, goncclNumResults};
  for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
    const char* s = goncclGetErrorString((goncclResult_t)others[i]);
    CHECK(s && strcmp(s, unknown) == 0, "code %d -> \"%s\"", others[i], s ? s : "(null)");
  }
  /* The last-error string is never NULL, with or without a communicator. */
  CHECK(goncclGetLastError(NULL) != NULL, "goncclGetLastError(NULL) is NULL");
}

static void test_before_init(const goncclUniqueId* id) {
  EXPECT(goncclGetVersion(NULL), NULL, goncclInvalidArgument, "version is NULL");
  EXPECT(goncclGetUniqueId(NULL), NULL, goncclInvalidArgument, "uniqueId is NULL");
  goncclComm_t c = (goncclComm_t)0x1;
  EXPECT(goncclCommInitRank(NULL, nranks, *id, rank), NULL, goncclInvalidArgument, "comm is NULL");
  EXPECT(goncclCommInitRankTimeout(&c, 0, *id, 0, 1000), NULL, goncclInvalidArgument, "nranks");
  CHECK(c == NULL, "a failed init leaves *comm = %p, not NULL", (void*)c);
  EXPECT(goncclCommInitRankTimeout(&c, -3, *id, 0, 1000), NULL, goncclInvalidArgument, "nranks");
  EXPECT(goncclCommInitRankTimeout(&c, INT_MAX, *id, 0, 1000), NULL, goncclInvalidArgument, "nranks");
  EXPECT(goncclCommInitRankTimeout(&c, nranks, *id, -1, 1000), NULL, goncclInvalidArgument, "out of range");
  EXPECT(goncclCommInitRankTimeout(&c, nranks, *id, nranks, 1000), NULL, goncclInvalidArgument, "out of range");
  goncclUniqueId garbage;
  memset(&garbage, 0xab, sizeof garbage);
  EXPECT(goncclCommInitRankTimeout(&c, nranks, garbage, rank, 1000), NULL, goncclInvalidArgument,
         "not a gonccl unique id");
  EXPECT(goncclGroupEnd(), NULL, goncclInvalidUsage, "without goncclGroupStart");
}

static void test_null_handles(goncclComm_t comm) {
  int n;
  float x = 1;
  EXPECT(goncclCommCount(NULL, &n), NULL, goncclInvalidArgument, "communicator is NULL");
  EXPECT(goncclCommUserRank(NULL, &n), NULL, goncclInvalidArgument, "communicator is NULL");
  EXPECT(goncclCommCount(comm, NULL), comm, goncclInvalidArgument, "count is NULL");
  EXPECT(goncclCommUserRank(comm, NULL), comm, goncclInvalidArgument, "rank is NULL");
  EXPECT(goncclAllReduce(&x, &x, 1, goncclFloat32, goncclSum, NULL, NULL), NULL, goncclInvalidArgument,
         "communicator is NULL");
  EXPECT(goncclBarrier(NULL, NULL), NULL, goncclInvalidArgument, "communicator is NULL");
  EXPECT(goncclSend(&x, 1, goncclFloat32, 0, NULL, NULL), NULL, goncclInvalidArgument, "communicator is NULL");
  EXPECT(goncclCommDestroy(NULL), NULL, goncclInvalidArgument, "communicator is NULL");
  EXPECT(goncclCommAbort(NULL), NULL, goncclInvalidArgument, "communicator is NULL");
  EXPECT(goncclCommDumpTrace(NULL, "/tmp"), NULL, goncclInvalidArgument, "communicator is NULL");
  EXPECT(goncclCommDumpTrace(comm, NULL), comm, goncclInvalidArgument, "path is NULL");

  /* NULL buffers with a non-zero count. */
  EXPECT(goncclAllReduce(NULL, &x, 1, goncclFloat32, goncclSum, comm, NULL), comm, goncclInvalidArgument,
         "sendbuff is NULL");
  EXPECT(goncclAllReduce(&x, NULL, 1, goncclFloat32, goncclSum, comm, NULL), comm, goncclInvalidArgument,
         "recvbuff is NULL");
  EXPECT(goncclAllGather(&x, NULL, 1, goncclFloat32, comm, NULL), comm, goncclInvalidArgument, "recvbuff is NULL");
  EXPECT(goncclBroadcast(NULL, NULL, 4, goncclFloat32, rank, comm, NULL), comm, goncclInvalidArgument, "is NULL");
  EXPECT(goncclReduceScatter(NULL, &x, 1, goncclFloat32, goncclSum, comm, NULL), comm, goncclInvalidArgument,
         "sendbuff is NULL");
  EXPECT(goncclAlltoAll(&x, NULL, 1, goncclFloat32, comm, NULL), comm, goncclInvalidArgument, "is NULL");
  EXPECT(goncclSend(NULL, 3, goncclFloat32, (rank + 1) % nranks, comm, NULL), comm, goncclInvalidArgument,
         "sendbuff is NULL");
  EXPECT(goncclRecv(NULL, 3, goncclFloat32, (rank + 1) % nranks, comm, NULL), comm, goncclInvalidArgument,
         "recvbuff is NULL");
  size_t counts[16] = {0}, displs[16] = {0};
  EXPECT(goncclAlltoAllv(&x, counts, displs, &x, NULL, displs, goncclFloat32, comm, NULL), comm,
         goncclInvalidArgument, "recvcounts is NULL");
  EXPECT(goncclAlltoAllv(&x, counts, NULL, &x, counts, displs, goncclFloat32, comm, NULL), comm,
         goncclInvalidArgument, "sdispls is NULL");

  /* Asynchronous calls need somewhere to put the request. */
  EXPECT(goncclAllReduceAsync(&x, &x, 1, goncclFloat32, goncclSum, comm, NULL, NULL), comm,
         goncclInvalidArgument, "request is NULL");
  EXPECT(goncclBarrierAsync(comm, NULL, NULL), comm, goncclInvalidArgument, "request is NULL");
  EXPECT(goncclRecvAsync(&x, 1, goncclFloat32, (rank + 1) % nranks, 0, comm, NULL, NULL), comm,
         goncclInvalidArgument, "request is NULL");

  /* Request functions on NULL. */
  int done;
  EXPECT(goncclRequestTest(NULL, &done), NULL, goncclInvalidArgument, "request is NULL");
  EXPECT(goncclRequestWait(NULL, 0), NULL, goncclInvalidArgument, "request is NULL");
  EXPECT(goncclRequestFree(NULL), NULL, goncclInvalidArgument, "request is NULL");
  EXPECT(goncclRequestSource(NULL, &done), NULL, goncclInvalidArgument, "request is NULL");
  const char* s = goncclRequestErrorString(NULL);
  CHECK(s != NULL && *s == 0, "goncclRequestErrorString(NULL) -> \"%s\"", s ? s : "(null)");

  /* A real request, with NULL out-parameters. */
  goncclRequest_t req = NULL;
  OK(goncclBarrierAsync(comm, NULL, &req), comm);
  EXPECT(goncclRequestTest(req, NULL), NULL, goncclInvalidArgument, "done is NULL");
  EXPECT(goncclRequestSource(req, NULL), NULL, goncclInvalidArgument, "peer is NULL");
  EXPECT(goncclRequestOnComplete(req, NULL, NULL), NULL, goncclInvalidArgument, "callback is NULL");
  OK(goncclRequestWait(req, -1), comm);
  OK(goncclRequestFree(req), comm);
}

static void test_enums(goncclComm_t comm) {
  float x[4] = {1, 2, 3, 4};
  /* 263 and 256 would wrap around to float32 and sum in an 8-bit conversion. */
  const int dtypes[] = {12, 63, 69, 255, 263, 256 + goncclInt32, -1, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
    goncclDataType_t dt = (goncclDataType_t)dtypes[i];
    char want[64];
    snprintf(want, sizeof want, "unknown data type %d", dtypes[i]);
    EXPECT(goncclAllReduce(x, x, 1, dt, goncclSum, comm, NULL), comm, goncclInvalidArgument, want);
    EXPECT(goncclBroadcast(x, x, 1, dt, 0, comm, NULL), comm, goncclInvalidArgument, want);
    EXPECT(goncclAllGather(x, x, 1, dt, comm, NULL), comm, goncclInvalidArgument, want);
    EXPECT(goncclSend(x, 1, dt, (rank + 1) % nranks, comm, NULL), comm, goncclInvalidArgument, want);
    EXPECT(goncclAlltoAll(x, x, 0, dt, comm, NULL), comm, goncclInvalidArgument, want);
  }
  const int ops[] = {5, 6, 63, 67, 256, 256 + goncclMax, -1, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    goncclRedOp_t op = (goncclRedOp_t)ops[i];
    char want[64];
    snprintf(want, sizeof want, "unknown reduction op %d", ops[i]);
    EXPECT(goncclAllReduce(x, x, 1, goncclFloat32, op, comm, NULL), comm, goncclInvalidArgument, want);
    EXPECT(goncclReduce(x, x, 1, goncclFloat32, op, 0, comm, NULL), comm, goncclInvalidArgument, want);
    EXPECT(goncclReduceScatter(x, x, 1, goncclFloat32, op, comm, NULL), comm, goncclInvalidArgument, want);
  }
  /* Defined enums that do not go together. */
  EXPECT(goncclAllReduce(x, x, 1, goncclFloat32, goncclBxor, comm, NULL), comm, goncclInvalidArgument, "bxor");
  EXPECT(goncclAllReduce(x, x, 1, goncclFloat8e4m3, goncclSum, comm, NULL), comm, goncclNotSupported, "float8");
}

static void test_overflow(goncclComm_t comm) {
  float x[4] = {0};
  const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2, SIZE_MAX / 4 + 1, (size_t)1 << 62, ((size_t)1 << 61) + 3};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    size_t n = huge[i];
    EXPECT(goncclAllReduce(x, x, n, goncclFloat64, goncclSum, comm, NULL), comm, goncclInvalidArgument, "overflows");
    EXPECT(goncclBroadcast(x, x, n, goncclInt8, 0, comm, NULL), comm, goncclInvalidArgument, "overflows");
    EXPECT(goncclSend(x, n, goncclFloat32, (rank + 1) % nranks, comm, NULL), comm, goncclInvalidArgument,
           "overflows");
    EXPECT(goncclRecv(x, n, goncclComplex128, (rank + 1) % nranks, comm, NULL), comm, goncclInvalidArgument,
           "overflows");
  }
  /* Byte sizes that fit in 64 bits but in no address space (more than 2^47 bytes): the
   * old code let 1<<46 floats (2^48 bytes) through and ran the collective, reading far
   * past the 16-byte buffer (a crash); 1<<50 panicked in unsafe.Slice (an internal
   * error). Both are refused now, naming the count. */
  const size_t vast[] = {(size_t)1 << 46, (size_t)1 << 50, ((size_t)1 << 47) / 4 + 1};
  for (size_t i = 0; i < sizeof vast / sizeof vast[0]; i++) {
    size_t n = vast[i];
    EXPECT(goncclAllReduce(x, x, n, goncclFloat32, goncclSum, comm, NULL), comm, goncclInvalidArgument,
           "overflows");
    EXPECT(goncclAllGather(x, x, n / (size_t)nranks + 1, goncclFloat32, comm, NULL), comm,
           goncclInvalidArgument, "overflows");
    EXPECT(goncclSend(x, n, goncclFloat32, (rank + 1) % nranks, comm, NULL), comm, goncclInvalidArgument,
           "overflows");
  }
  /* Counts that fit alone but overflow once multiplied by the number of ranks. */
  size_t per = SIZE_MAX / (size_t)nranks + 1;
  EXPECT(goncclAllGather(x, x, per, goncclInt8, comm, NULL), comm, goncclInvalidArgument, "overflows");
  EXPECT(goncclReduceScatter(x, x, per, goncclInt8, goncclSum, comm, NULL), comm, goncclInvalidArgument,
         "overflows");
  EXPECT(goncclAlltoAll(x, x, per, goncclInt8, comm, NULL), comm, goncclInvalidArgument, "overflows");
  EXPECT(goncclGather(x, x, per, goncclInt8, rank, comm, NULL), comm, goncclInvalidArgument, "overflows");
  EXPECT(goncclScatter(x, x, per, goncclInt8, rank, comm, NULL), comm, goncclInvalidArgument, "overflows");
  /* alltoallv: a count or displacement near SIZE_MAX, or that add up past it. */
  size_t counts[16], displs[16], zero[16] = {0};
  for (int j = 0; j < nranks; j++) counts[j] = 1, displs[j] = 0;
  counts[nranks - 1] = SIZE_MAX;
  EXPECT(goncclAlltoAllv(x, counts, displs, x, zero, zero, goncclFloat32, comm, NULL), comm,
         goncclInvalidArgument, "too large");
  counts[nranks - 1] = 1;
  displs[nranks - 1] = SIZE_MAX - 1;
  EXPECT(goncclAlltoAllv(x, counts, displs, x, zero, zero, goncclFloat32, comm, NULL), comm,
         goncclInvalidArgument, "too large");
  displs[nranks - 1] = ((size_t)1 << 58);
  counts[nranks - 1] = ((size_t)1 << 58);
  EXPECT(goncclAlltoAllv(x, counts, displs, x, zero, zero, goncclFloat64, comm, NULL), comm,
         goncclInvalidArgument, "reach element");
}

static void test_ranks_out_of_range(goncclComm_t comm) {
  float x[4] = {0};
  const int bad[] = {-1, -2, nranks, nranks + 5, INT_MAX, INT_MIN};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int r = bad[i];
    EXPECT(goncclBroadcast(x, x, 1, goncclFloat32, r, comm, NULL), comm, goncclInvalidArgument, "root");
    EXPECT(goncclReduce(x, x, 1, goncclFloat32, goncclSum, r, comm, NULL), comm, goncclInvalidArgument, "root");
    EXPECT(goncclGather(x, x, 1, goncclFloat32, r, comm, NULL), comm, goncclInvalidArgument, "root");
    EXPECT(goncclScatter(x, x, 1, goncclFloat32, r, comm, NULL), comm, goncclInvalidArgument, "root");
    EXPECT(goncclSend(x, 1, goncclFloat32, r, comm, NULL), comm, goncclInvalidArgument, "peer");
    if (r != GONCCL_ANY_SOURCE)
      EXPECT(goncclRecv(x, 1, goncclFloat32, r, comm, NULL), comm, goncclInvalidArgument, "peer");
  }
  EXPECT(goncclSend(x, 1, goncclFloat32, rank, comm, NULL), comm, goncclInvalidArgument, "this rank");
  EXPECT(goncclRecv(x, 1, goncclFloat32, rank, comm, NULL), comm, goncclInvalidArgument, "this rank");
}

/* After all of that, the communicator still computes. */
static void check_still_works(goncclComm_t comm) {
  float v[3] = {(float)rank, 1, 2};
  OK(goncclAllReduce(v, v, 3, goncclFloat32, goncclSum, comm, NULL), comm);
  CHECK(v[0] == (float)(nranks * (nranks - 1) / 2) && v[1] == (float)nranks && v[2] == (float)(2 * nranks),
        "all_reduce after bad input: %f %f %f", v[0], v[1], v[2]);
}

static void test_after_destroy(goncclComm_t comm) {
  float x = 0;
  int n;
  EXPECT(goncclAllReduce(&x, &x, 1, goncclFloat32, goncclSum, comm, NULL), comm, goncclInvalidUsage, "destroyed");
  EXPECT(goncclSend(&x, 1, goncclFloat32, 0, comm, NULL), comm, goncclInvalidUsage, "destroyed");
  EXPECT(goncclCommCount(comm, &n), comm, goncclInvalidUsage, "destroyed");
  EXPECT(goncclCommDumpTrace(comm, "/tmp"), comm, goncclInvalidUsage, "destroyed");
  EXPECT(goncclCommDestroy(comm), comm, goncclInvalidUsage, "destroyed");
  EXPECT(goncclCommAbort(comm), comm, goncclInvalidUsage, "destroyed");
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  CHECK(nranks >= 2 && nranks <= 16, "this test wants 2..16 ranks");
  test_error_strings();
  goncclUniqueId id;
  share_id(argv[3], &id);
  test_before_init(&id);
  goncclComm_t comm;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, 60000), NULL);
  test_null_handles(comm);
  check_still_works(comm);
  test_enums(comm);
  test_overflow(comm);
  test_ranks_out_of_range(comm);
  check_still_works(comm);
  OK(goncclCommDestroy(comm), NULL);
  test_after_destroy(comm);
  printf("rank %d: %d checks passed\n", rank, checks);
  return 0;
}
