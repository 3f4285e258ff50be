/*
 * hooks_selftest.c: the fake driver's test hooks (tests/fakecuda/fakecuda.h) do what
 * cuda_capi_test.c relies on, checked without gonccl: a consumer (fakecudaCheckF32)
 * that runs before the data it checks counts a stale read and one ordered after it
 * does not; a stream's delay makes its work run late; fills and adds are stream-ordered;
 * capture starts and ends. cuda_capi_test.c only ever expects zero stale reads, which a
 * consumer that never looked would also give: this is the check that it looks.
 *
 * tests/test_realcuda_link.py runs it against the fake itself and through realcuda.c
 * over the fake built as libcuda.so.1, so both implementations of the hooks agree.
 * (Not on a GPU: realcuda.c's delays are host functions, which a real driver may run
 * one at a time on one thread, so the deliberate stale read below would be a race.)
 */
#include <stdio.h>
#include <stdlib.h>

#include "fakecuda.h"

int cuCtxSetCurrent(void* ctx);

#define LEGACY ((void*)0x1)
#define NON_BLOCKING 0x1
#define N 4096

static int failures;

#define EXPECT(cond, ...)             \
  do {                                \
    if (!(cond)) {                    \
      fprintf(stderr, "FAIL: ");      \
      fprintf(stderr, __VA_ARGS__);   \
      fprintf(stderr, "\n");          \
      failures++;                     \
    }                                 \
  } while (0)

static long stale(void) {
  fakecudaCounters c;
  fakecudaGetCounters(&c);
  return c.stale_reads;
}

int main(void) {
  EXPECT(cuCtxSetCurrent(fakecudaContext(0)) == 0, "cuCtxSetCurrent");
  void* g = fakecudaStreamCreateWithFlags(0, NON_BLOCKING);
  void* b = fakecudaStreamCreate(0);
  float* x = fakecudaMalloc(0, N * sizeof(float));
  EXPECT(g && b && x, "stream or memory");

  /* Stream order: fill, add, check on one stream; the host sees the result. */
  EXPECT(fakecudaFillF32(g, x, N, 2, 20000) == 0, "fill");
  EXPECT(fakecudaAddF32(g, x, N, 0.5f, 0) == 0, "add");
  EXPECT(fakecudaCheckF32(g, x, N, 2.5f, 0) == 0, "check");
  EXPECT(fakecudaStreamDrain(g) == 0, "drain");
  EXPECT(x[0] == 2.5f && x[N - 1] == 2.5f, "fill then add: %f %f", x[0], x[N - 1]);
  EXPECT(stale() == 0, "an ordered consumer counted %ld stale reads", stale());

  /* A late stream: its fill runs 100 ms late; a consumer on the legacy stream, which
   * does not wait for a non-blocking stream, runs before it and counts a stale read. */
  EXPECT(fakecudaStreamSetDelay(g, 100000) == 0, "stream delay");
  EXPECT(fakecudaFillF32(g, x, N, 7, 0) == 0, "late fill");
  EXPECT(fakecudaCheckF32(LEGACY, x, N, 7, 0) == 0, "early check");
  EXPECT(fakecudaStreamDrain(LEGACY) == 0, "drain legacy");
  EXPECT(stale() == 1, "a consumer that ran before the late fill counted %ld stale reads, want 1", stale());
  EXPECT(fakecudaStreamDrain(g) == 0, "drain g");
  EXPECT(x[5] == 7, "late fill: %f", x[5]);
  EXPECT(fakecudaStreamSetDelay(g, 0) == 0, "no delay");

  /* A blocking stream's work and the legacy stream's are ordered both ways. */
  EXPECT(fakecudaFillF32(b, x, N, 9, 30000) == 0, "slow fill on a blocking stream");
  EXPECT(fakecudaCheckF32(LEGACY, x, N, 9, 0) == 0, "check after it");
  EXPECT(fakecudaStreamDrain(LEGACY) == 0, "drain legacy");
  EXPECT(stale() == 1, "legacy after blocking: %ld stale reads, want still 1", stale());

  /* Capture begins and ends (twice: the stream is usable again). */
  for (int i = 0; i < 2; i++) {
    EXPECT(fakecudaBeginCapture(g) == 0, "begin capture %d", i);
    EXPECT(fakecudaEndCapture(g) == 0, "end capture %d", i);
  }

  fakecudaCounters c;
  fakecudaGetCounters(&c);
  EXPECT(c.kernels >= 7, "%ld fake kernels counted, want 7", c.kernels);
  EXPECT(fakecudaFree(x) == 0, "free");
  EXPECT(fakecudaFree(x) != 0, "double free succeeded");
  if (failures) return 1;
  printf("hooks selftest: all checks passed (%ld stale read, as planted)\n", c.stale_reads);
  return 0;
}
