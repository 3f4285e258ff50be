/*
 * cuda_auto_test.c: GONCCL_DEVICE_PATH=model chooses the path of each collective by its
 * size among every path the GPUs allow, against the fake CUDA driver (tests/fakecuda). Run one process per rank as
 *     GONCCL_CUDA_LIBRARY=/path/libfakecuda.so cuda_auto_test RANK NRANKS ID_FILE LARGE
 * with GONCCL_DEVICE_PATH_COST making the staged path the cheapest for small messages
 * (tests/test_cuda_capi.py sets it), so that one communicator runs a small all_reduce
 * staged and a large one on LARGE ("device": ranks on devices 0 and 1, the device path;
 * "samegpu": every rank on device 0 with CUDA_AUTO_TEST_ONE_DEVICE=1, the same-GPU
 * path), then the small one again, staged again. The fake's counters prove the path of
 * each: only the staged path copies host to device (H2D); the device path waits on the
 * GPU for its peers' flags (gpu_waits), the same-GPU path never does. Every result is
 * compared element by element with the sum computed here on the CPU.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"
#include "gonccl.h"
#include "test_harness.h"

int cuCtxSetCurrent(void* ctx);

static int dev;
static void* stream;

static float input(int r, size_t i) { return (float)((r + 1) * (int)(i % 13)) + 0.5f * (float)r; }

/* all_reduce runs a sum of n floats and checks it; returns the fake's counters' change. */
static fakecudaCounters all_reduce(goncclComm_t comm, size_t n, const char* what) {
  float* send = fakecudaMalloc(dev, n * sizeof(float));
  float* recv = fakecudaMalloc(dev, n * sizeof(float));
  CHECK(send != NULL && recv != NULL, "fakecudaMalloc");
  for (size_t i = 0; i < n; i++) {
    send[i] = input(rank, i);
    recv[i] = -1;
  }
  fakecudaCounters before, after;
  fakecudaStreamDrain(stream);
  fakecudaGetCounters(&before);
  OK(goncclAllReduce(send, recv, n, goncclFloat32, goncclSum, comm, stream), comm);
  fakecudaStreamDrain(stream);
  fakecudaGetCounters(&after);
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++) want += input(r, i);
    CHECK(recv[i] == want, "%s all_reduce of %zu floats: [%zu] = %f, want %f", what, n, i, recv[i], want);
  }
  fakecudaFree(send);
  fakecudaFree(recv);
  fakecudaCounters d = after;
  d.htod -= before.htod;
  d.dtoh -= before.dtoh;
  d.gpu_waits -= before.gpu_waits;
  return d;
}

static void expect_staged(fakecudaCounters d, const char* what) {
  CHECK(d.htod > 0 && d.dtoh > 0, "%s all_reduce did not stage: %ld H2D, %ld D2H copies", what, d.htod, d.dtoh);
  CHECK(d.gpu_waits == 0, "%s all_reduce waited on the GPU %ld times: not staged", what, d.gpu_waits);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE device|samegpu\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  const char* large_path = argv[4];
  CHECK(strcmp(large_path, "device") == 0 || strcmp(large_path, "samegpu") == 0, "LARGE: %s", large_path);
  const char* one = getenv("CUDA_AUTO_TEST_ONE_DEVICE");
  dev = one != NULL && strcmp(one, "1") == 0 ? 0 : rank % 2;
  CHECK(cuCtxSetCurrent(fakecudaContext(dev)) == 0, "cuCtxSetCurrent");
  fakecudaSetDelay(0, 200);
  stream = fakecudaStreamCreate(dev);

  goncclUniqueId id;
  share_id(argv[3], &id);
  goncclComm_t comm;
  OK(goncclCommInitRankTimeout(&comm, nranks, id, rank, 60000), NULL);

  fakecudaCounters small = all_reduce(comm, 256, "small");
  expect_staged(small, "the small (1 KiB)");

  fakecudaCounters large = all_reduce(comm, 1 << 20, "large");
  CHECK(large.htod == 0, "the large (4 MiB) all_reduce copied host to device %ld times: it staged", large.htod);
  if (strcmp(large_path, "device") == 0)
    CHECK(large.gpu_waits > 0, "the large all_reduce never waited on the GPU for a peer: not the device path");
  else
    /* One wait per stream per operation: rank 0's for each other rank, theirs for rank 0. */
    CHECK(large.gpu_waits == (rank == 0 ? nranks - 1 : 1),
          "the large all_reduce waited on the GPU %ld times, want %d: not the same-GPU path", large.gpu_waits,
          rank == 0 ? nranks - 1 : 1);

  /* The choice is per operation: a small one after the large one stages again. */
  expect_staged(all_reduce(comm, 256, "small again"), "the second small");

  OK(goncclCommDestroy(comm), NULL);
  fakecudaStreamDrain(stream);
  fakecudaCounters c;
  fakecudaGetCounters(&c);
  CHECK(c.bad_access == 0, "%ld queued operations touched freed memory", c.bad_access);
  printf("rank %d: %d checks passed (small staged: %ld H2D; large on the %s path: %ld H2D, %ld GPU-side waits)\n",
         rank, checks, small.htod, large_path, large.htod, large.gpu_waits);
  return 0;
}
