/* One rank of the scale benchmark (bench/scale/scale.py starts N of them): a plain C
 * process that joins an N-rank communicator through the C ABI and reports, as one line
 * of JSON on stdout: how long init took and how many fds it holds after it; the first
 * and second all_reduce of 8 bytes and of 1 MiB in ordinary (calloc) memory (the first
 * of each includes the connections made on demand); with ALLOC=1 the same two sizes
 * again in buffers from goncclMemAlloc (the zero-copy path's memory); the fds it holds
 * at the end, its peak resident set; with SCALE_LOOP=N the time per operation of N more
 * all_reduces of 1 MiB, then of N of 8 bytes, back to back; and whether every result was exact.
 * Usage: scale RANK NRANKS ID_FILE [ALLOC]
 * With SCALE_START_FIFO set, every rank waits until the launcher closes its end of that
 * FIFO (it does once all ranks exist) before it starts init: so init is timed from a
 * common start, as in a job whose launcher hands the unique id out after starting every
 * process (MPI_Bcast), not from when each process happened to be spawned. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "gonccl.h"

/* Weak, so that the probe also runs against libraries from before goncclMemAlloc (without
 * ALLOC): a comparison across commits. */
#pragma weak goncclMemAlloc
#pragma weak goncclMemFree

#define BIG_COUNT ((size_t)(1 << 20) / sizeof(int64_t)) /* 1 MiB of int64 */

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

/* The process's peak resident set (VmHWM in /proc/self/status), in KiB; -1 if unknown. */
static long peak_rss_kib(void) {
  FILE* f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "VmHWM: %ld kB", &kib) == 1) break;
  fclose(f);
  return kib;
}

static int fail(int rank, const char* what, goncclResult_t r, goncclComm_t comm) {
  fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, goncclGetErrorString(r), goncclGetLastError(comm));
  /* SCALE_HOLD_MS=N: stay N ms before leaving, as a survivor that goes on (by shrinking
   * its group) would, so that its peers learn of a loss from the rank that saw it, not
   * from this one leaving. Then abort, as an application should after a failed
   * operation: its peers hear why it leaves. */
  if (comm) {
    const char* hold = getenv("SCALE_HOLD_MS");
    if (hold) usleep((useconds_t)atoi(hold) * 1000);
    goncclCommAbort(comm);
  }
  return 1;
}

/* Rank r's element i is (r + 1) * (i % 5 + 1); the sum over n ranks is exact in int64. */
static void fill(int64_t* buf, size_t count, int rank) {
  for (size_t i = 0; i < count; i++) buf[i] = (int64_t)(rank + 1) * (int64_t)(i % 5 + 1);
}

static int exact(const int64_t* buf, size_t count, int nranks) {
  int64_t total = (int64_t)nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < count; i++)
    if (buf[i] != total * (int64_t)(i % 5 + 1)) return 0;
  return 1;
}

/* all_reduce (in place) count int64 of buf, filled afresh; its time in *secs. */
static goncclResult_t timed_sum(int64_t* buf, size_t count, int rank, goncclComm_t comm, double* secs) {
  fill(buf, count, rank);
  double t0 = now();
  goncclResult_t r = goncclAllReduce(buf, buf, count, goncclInt64, goncclSum, comm, NULL);
  *secs = now() - t0;
  return r;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: %s RANK NRANKS ID_FILE [ALLOC]\n", argv[0]);
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* die with the script that started this rank */
  /* Opened at once (non-blocking), so that the launcher's end, open since before this
   * process started, is there to wait on whenever this rank gets to it. */
  const char* fifo = getenv("SCALE_START_FIFO");
  int start_fd = -1;
  if (fifo && (start_fd = open(fifo, O_RDONLY | O_NONBLOCK)) < 0) {
    fprintf(stderr, "opening %s: %s\n", fifo, strerror(errno));
    return 1;
  }
  int rank = atoi(argv[1]), nranks = atoi(argv[2]);
  int alloc = argc == 5 && atoi(argv[4]) != 0;
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
  if (start_fd >= 0) { /* blocks until the launcher closes its end: end-of-file */
    int fl = fcntl(start_fd, F_GETFL);
    fcntl(start_fd, F_SETFL, fl & ~O_NONBLOCK);
    char c;
    while (read(start_fd, &c, 1) > 0) {
    }
    close(start_fd);
  }
  goncclComm_t comm;
  double t0 = now();
  goncclResult_t r = goncclCommInitRankTimeout(&comm, nranks, id, rank, 300000);
  double init = now() - t0;
  if (r != goncclSuccess) return fail(rank, "init", r, NULL);
  int fds = count_fds();
  int ok = 1;
  int64_t small[1];
  double t_small[2], t_big[2], t_asmall[2] = {0, 0}, t_abig[2] = {0, 0};
  for (int k = 0; k < 2; k++) {
    if ((r = timed_sum(small, 1, rank, comm, &t_small[k])) != goncclSuccess) return fail(rank, "all_reduce 8 B", r, comm);
    ok &= exact(small, 1, nranks);
  }
  int64_t* big = calloc(BIG_COUNT, sizeof(int64_t));
  if (!big) return fail(rank, "calloc", goncclSystemError, NULL);
  for (int k = 0; k < 2; k++) {
    if ((r = timed_sum(big, BIG_COUNT, rank, comm, &t_big[k])) != goncclSuccess)
      return fail(rank, "all_reduce 1 MiB", r, comm);
    ok &= exact(big, BIG_COUNT, nranks);
  }
  /* SCALE_LOOP=N: N more back to back, timed together: the time per operation of a
   * loop, where the ranks' skew on entering one operation is paid once, not per op. */
  int loop = getenv("SCALE_LOOP") ? atoi(getenv("SCALE_LOOP")) : 0;
  double t_loop = 0, t_loop8 = 0;
  if (loop > 0) {
    /* SCALE_LOOP_STARTED=PATH: rank 0 creates PATH as the loop starts (for tests that
     * strike while it runs). */
    const char* started = getenv("SCALE_LOOP_STARTED");
    if (started && rank == 0) {
      FILE* f = fopen(started, "w");
      if (f) fclose(f);
    }
    double t_one, l0 = now();
    for (int k = 0; k < loop; k++) {
      if ((r = timed_sum(big, BIG_COUNT, rank, comm, &t_one)) != goncclSuccess)
        return fail(rank, "all_reduce 1 MiB (loop)", r, comm);
      ok &= exact(big, BIG_COUNT, nranks);
    }
    t_loop = (now() - l0) / loop;
    /* And N of 8 bytes: the time per operation where latency, not bandwidth, counts. */
    l0 = now();
    for (int k = 0; k < loop; k++) {
      if ((r = timed_sum(small, 1, rank, comm, &t_one)) != goncclSuccess) return fail(rank, "all_reduce 8 B (loop)", r, comm);
      ok &= exact(small, 1, nranks);
    }
    t_loop8 = (now() - l0) / loop;
  }
  free(big);
  if (alloc && !goncclMemAlloc) {
    fprintf(stderr, "rank %d: this library has no goncclMemAlloc: run without ALLOC\n", rank);
    return 1;
  }
  if (alloc) {
    void *abig, *asmall;
    if ((r = goncclMemAlloc(&abig, BIG_COUNT * sizeof(int64_t))) != goncclSuccess) return fail(rank, "goncclMemAlloc", r, comm);
    if ((r = goncclMemAlloc(&asmall, sizeof(int64_t))) != goncclSuccess) return fail(rank, "goncclMemAlloc", r, comm);
    for (int k = 0; k < 2; k++) {
      if ((r = timed_sum(asmall, 1, rank, comm, &t_asmall[k])) != goncclSuccess)
        return fail(rank, "all_reduce 8 B (goncclMemAlloc)", r, comm);
      ok &= exact(asmall, 1, nranks);
      if ((r = timed_sum(abig, BIG_COUNT, rank, comm, &t_abig[k])) != goncclSuccess)
        return fail(rank, "all_reduce 1 MiB (goncclMemAlloc)", r, comm);
      ok &= exact(abig, BIG_COUNT, nranks);
    }
    goncclMemFree(abig);
    goncclMemFree(asmall);
  }
  int fds_after = count_fds();
  printf("{\"rank\": %d, \"init_s\": %.6f, \"fds_init\": %d, \"first_allreduce_s\": %.6f, "
         "\"second_allreduce_s\": %.6f, \"first_1mib_s\": %.6f, \"second_1mib_s\": %.6f, "
         "\"alloc_first_8b_s\": %.6f, \"alloc_second_8b_s\": %.6f, \"alloc_first_1mib_s\": %.6f, "
         "\"alloc_second_1mib_s\": %.6f, \"loop_1mib_s\": %.6f, \"loop_8b_s\": %.6f, \"fds_after\": %d, \"rss_peak_mib\": %.1f, \"exact\": %s}\n",
         rank, init, fds, t_small[0], t_small[1], t_big[0], t_big[1], t_asmall[0], t_asmall[1], t_abig[0], t_abig[1], t_loop, t_loop8,
         fds_after, peak_rss_kib() / 1024.0, ok ? "true" : "false");
  fflush(stdout);
  r = goncclCommDestroy(comm);
  if (r != goncclSuccess) return fail(rank, "destroy", r, NULL);
  return 0;
}
