/* A rank of the link memory soak (tests/test_link_memory.py): joins an NRANKS-rank
 * communicator through the C ABI and runs all-to-alls of BYTES per rank (each peer's
 * block BYTES/NRANKS) back to back for SECONDS, checking every result, then prints one
 * line of JSON: iterations, the peak and final resident set (VmHWM, VmRSS, KiB), the
 * fds it holds, and how many results were wrong.
 * Usage: alltoall_soak RANK NRANKS ID_FILE SECONDS BYTES */
#include <dirent.h>
#include <stdint.h>
#include <time.h>

#include "test_harness.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long status_kib(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t k = strlen(key);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, k) == 0) v = strtol(line + k, NULL, 10);
  fclose(f);
  return v;
}

static int count_fds(void) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1;
}

/* What rank src sends rank dst as element i in iteration it. */
static int64_t value(int src, int dst, size_t i, long it) {
  return ((int64_t)src << 40) ^ ((int64_t)dst << 24) ^ (int64_t)(i * 7 + (size_t)it);
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE SECONDS BYTES\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[1]);
  nranks = atoi(argv[2]);
  double seconds = atof(argv[4]);
  size_t count = (size_t)atol(argv[5]) / sizeof(int64_t) / (size_t)nranks; /* per peer */
  goncclUniqueId id;
  share_id(argv[3], &id);
  goncclComm_t comm;
  OK(goncclCommInitRank(&comm, nranks, id, rank), NULL);
  int64_t* send = malloc(count * nranks * sizeof(int64_t));
  int64_t* recv = malloc(count * nranks * sizeof(int64_t));
  CHECK(send && recv, "out of memory");
  long it = 0, wrong = 0;
  double end = now() + seconds;
  for (;;) {
    /* Rank 0's clock decides for all: every rank runs as many all-to-alls. */
    int64_t go = now() < end, all = 0;
    OK(goncclBroadcast(&go, &all, 1, goncclInt64, 0, comm, NULL), comm);
    if (!all) break;
    for (int p = 0; p < nranks; p++)
      for (size_t i = 0; i < count; i++) send[p * count + i] = value(rank, p, i, it);
    OK(goncclAlltoAll(send, recv, count, goncclInt64, comm, NULL), comm);
    for (int p = 0; p < nranks; p++)
      for (size_t i = 0; i < count; i++)
        if (recv[p * count + i] != value(p, rank, i, it)) {
          wrong++;
          break;
        }
    it++;
  }
  printf("{\"rank\": %d, \"iterations\": %ld, \"hwm_kib\": %ld, \"rss_kib\": %ld, \"fds\": %d, \"wrong\": %ld}\n", rank,
         it, status_kib("VmHWM:"), status_kib("VmRSS:"), count_fds(), wrong);
  fflush(stdout);
  OK(goncclCommDestroy(comm), NULL);
  free(send);
  free(recv);
  return 0;
}
