/* Shared scaffolding of the C ABI test programs (capi_test.c, bad_input_test.c,
 * cuda_capi_test.c): the rank globals, CHECK/OK, and share_id, by which rank 0 hands the
 * unique id to the other processes through a file. Header-only: each program is one
 * translation unit. */
#ifndef GONCCL_TEST_HARNESS_H_
#define GONCCL_TEST_HARNESS_H_

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gonccl.h"

static int rank, nranks, checks;

#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "rank %d: FAILED %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      exit(1);                                                              \
    }                                                                       \
    checks++;                                                               \
  } while (0)

#define OK(call, comm)                                                          \
  do {                                                                          \
    goncclResult_t r_ = (call);                                                 \
    CHECK(r_ == goncclSuccess, "%s -> %s: %s", #call, goncclGetErrorString(r_), \
          goncclGetLastError(comm));                                            \
  } while (0)

/* Rank 0 writes the unique id to path (atomically, by rename); the others wait for it. */
static void share_id(const char* path, goncclUniqueId* id) {
  if (rank == 0) {
    OK(goncclGetUniqueId(id), NULL);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    CHECK(f && fwrite(id, sizeof *id, 1, f) == 1 && fclose(f) == 0, "writing %s", tmp);
    CHECK(rename(tmp, path) == 0, "rename to %s: %s", path, strerror(errno));
    return;
  }
  for (int i = 0; i < 3000; i++) { /* up to 30 s */
    FILE* f = fopen(path, "rb");
    if (f) {
      size_t n = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (n == 1) return;
    }
    usleep(10000);
  }
  CHECK(0, "no unique id appeared in %s", path);
}

#endif /* GONCCL_TEST_HARNESS_H_ */
