/* One rank of the scale benchmark (bench/scale/scale.py starts N of them): a plain C
 * process that joins an N-rank communicator through the C ABI, reports how long init
 * took, how many fds it holds after init, how long its first 8-byte all_reduce took
 * (connections made on demand included) and whether the result was exact, as one line
 * of JSON on stdout. Usage: scale RANK NRANKS ID_FILE */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gonccl.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int count_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory's own fd */
}

static int fail(int rank, const char* what, goncclResult_t r, goncclComm_t comm) {
  fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, goncclGetErrorString(r), goncclGetLastError(comm));
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE\n", argv[0]);
    return 2;
  }
  int rank = atoi(argv[1]), nranks = atoi(argv[2]);
  goncclUniqueId id;
  if (rank == 0) {
    goncclResult_t r = goncclGetUniqueId(&id);
    if (r != goncclSuccess) return fail(rank, "goncclGetUniqueId", r, NULL);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[3]);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, argv[3]) != 0) {
      fprintf(stderr, "rank 0: writing %s: %s\n", argv[3], strerror(errno));
      return 1;
    }
  } else {
    int got = 0;
    for (int i = 0; i < 12000 && !got; i++) { /* up to 120 s */
      FILE* f = fopen(argv[3], "rb");
      if (f) {
        got = fread(&id, sizeof id, 1, f) == 1;
        fclose(f);
      }
      if (!got) usleep(10000);
    }
    if (!got) {
      fprintf(stderr, "rank %d: no unique id in %s\n", rank, argv[3]);
      return 1;
    }
  }
  goncclComm_t comm;
  double t0 = now();
  goncclResult_t r = goncclCommInitRankTimeout(&comm, nranks, id, rank, 300000);
  double init = now() - t0;
  if (r != goncclSuccess) return fail(rank, "init", r, NULL);
  int fds = count_fds();
  int64_t v = rank + 1;
  t0 = now();
  r = goncclAllReduce(&v, &v, 1, goncclInt64, goncclSum, comm, NULL);
  double first = now() - t0;
  if (r != goncclSuccess) return fail(rank, "all_reduce", r, comm);
  int64_t want = (int64_t)nranks * (nranks + 1) / 2;
  t0 = now();
  int64_t w = rank + 1;
  r = goncclAllReduce(&w, &w, 1, goncclInt64, goncclSum, comm, NULL);
  double second = now() - t0;
  if (r != goncclSuccess) return fail(rank, "all_reduce", r, comm);
  int fds_after = count_fds();
  printf("{\"rank\": %d, \"init_s\": %.6f, \"fds_init\": %d, \"first_allreduce_s\": %.6f, "
         "\"second_allreduce_s\": %.6f, \"fds_after\": %d, \"exact\": %s}\n",
         rank, init, fds, first, second, fds_after, v == want && w == want ? "true" : "false");
  fflush(stdout);
  r = goncclCommDestroy(comm);
  if (r != goncclSuccess) return fail(rank, "destroy", r, NULL);
  return 0;
}
