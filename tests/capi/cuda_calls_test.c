/*
 * cuda_calls_test.c: the driver calls of the default path (GONCCL_DEVICE_PATH unset:
 * auto), counted by the fake CUDA driver (tests/fakecuda/calls.c). Run one process per
 * rank as
 *     GONCCL_CUDA_LIBRARY=/path/libfakecuda.so cuda_calls_test RANK NRANKS ID_FILE MIB
 * with CUDA_CALLS_TEST_ONE_DEVICE=1 to put every rank on device 0 (else rank r is on
 * device r % 2). Each rank runs two all_reduces of MIB MiB of float32 on device buffers
 * (the first is the communicator's first operation on device buffers, which decides its
 * paths), checks each result, and prints the driver calls of each, and how long it
 * took, as
 *     rank R: op K calls: NAME COUNT NAME COUNT ...
 *     rank R: op K took: MICROSECONDS
 * tests/test_cuda_capi.py holds them to docs/gpu.md's list. The program needs nothing
 * newer than the C ABI of e18d63d, so that the same counts can be taken there.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fakecuda.h"
#include "gonccl.h"
#include "test_harness.h"

int cuCtxSetCurrent(void* ctx);
int fakecudaCallCounts(char* buf, size_t n);

static char* counts(void) {
  int need = fakecudaCallCounts(NULL, 0);
  char* buf = malloc((size_t)need);
  CHECK(buf != NULL, "malloc");
  fakecudaCallCounts(buf, (size_t)need);
  return buf;
}

/* print_delta prints, on one line, each entry point's calls in after minus before. */
static void print_delta(int op, const char* before, const char* after) {
  printf("rank %d: op %d calls:", rank, op);
  char name[128];
  long n;
  int used;
  for (const char* p = after; sscanf(p, "%127s %ld\n%n", name, &n, &used) == 2; p += used) {
    long was = 0;
    const char* q = before;
    char bname[128];
    long bn;
    int bused;
    for (; sscanf(q, "%127s %ld\n%n", bname, &bn, &bused) == 2; q += bused) {
      if (strcmp(bname, name) == 0) {
        was = bn;
        break;
      }
    }
    if (n - was != 0) printf(" %s %ld", name, n - was);
  }
  printf("\n");
  fflush(stdout);
}

static float input(int r, size_t i) { return (float)((r + 1) * (int)(i % 13)); }

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE MIB\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  size_t n = (size_t)atoi(argv[4]) << 18; /* floats */
  const char* one = getenv("CUDA_CALLS_TEST_ONE_DEVICE");
  int dev = one != NULL && strcmp(one, "1") == 0 ? 0 : rank % 2;
  CHECK(cuCtxSetCurrent(fakecudaContext(dev)) == 0, "cuCtxSetCurrent");
  fakecudaSetDelay(0, 0);
  void* stream = fakecudaStreamCreate(dev);
  float* buf = fakecudaMalloc(dev, n * sizeof(float));
  CHECK(buf != NULL, "fakecudaMalloc");

  goncclUniqueId id;
  share_id(argv[3], &id);
  goncclComm_t comm;
  OK(goncclCommInitRank(&comm, nranks, id, rank), NULL);
  for (int op = 0; op < 2; op++) {
    for (size_t i = 0; i < n; i++) buf[i] = input(rank, i);
    char* before = counts();
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    OK(goncclAllReduce(buf, buf, n, goncclFloat32, goncclSum, comm, stream), comm);
    fakecudaStreamDrain(stream);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    char* after = counts();
    print_delta(op, before, after);
    printf("rank %d: op %d took: %ld\n", rank, op,
           (long)((t1.tv_sec - t0.tv_sec) * 1000000L + (t1.tv_nsec - t0.tv_nsec) / 1000));
    free(before);
    free(after);
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int r = 0; r < nranks; r++) want += input(r, i);
      if (buf[i] != want) CHECK(0, "op %d: [%zu] = %f, want %f", op, i, buf[i], want);
    }
  }
  OK(goncclCommDestroy(comm), NULL);
  printf("rank %d: checks passed\n", rank);
  return 0;
}
