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
 * process (MPI_Bcast), not from when each process happened to be spawned.
 * With SCALE_SHRINK=R1,R2,... (the ranks of a host a test takes away), a rank not
 * listed whose all_reduce fails goes on as torch's shrink_group does on gonccl: see
 * shrink. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>
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

static double wall(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return tv.tv_sec + tv.tv_usec * 1e-6;
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

/* Whether rank is listed in SCALE_SHRINK (the ranks the survivors exclude); *below
 * gets how many listed ranks are below rank, *n how many are listed. */
static int shrink_listed(int rank, int* below, int* n) {
  const char* list = getenv("SCALE_SHRINK");
  int listed = 0;
  *below = *n = 0;
  for (const char* p = list; p && *p;) {
    char* end;
    long r = strtol(p, &end, 10);
    if (end == p) break;
    ++*n;
    if (r < rank) ++*below;
    if (r == rank) listed = 1;
    p = *end == ',' ? end + 1 : end;
  }
  return listed;
}

/* Reads (or, as new rank 0, makes and writes) the unique id in path; 0 on success. */
static int share_id(int rank, const char* path, goncclUniqueId* id) {
  if (rank == 0) {
    goncclResult_t r = goncclGetUniqueId(id);
    if (r != goncclSuccess) {
      fprintf(stderr, "rank 0: goncclGetUniqueId: %s\n", goncclGetErrorString(r));
      return 1;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      fprintf(stderr, "rank 0: writing %s: %s\n", path, strerror(errno));
      return 1;
    }
    return 0;
  }
  for (int i = 0; i < 12000; i++) { /* up to 120 s */
    FILE* f = fopen(path, "rb");
    if (f) {
      int got = fread(id, sizeof *id, 1, f) == 1;
      fclose(f);
      if (got) return 0;
    }
    usleep(10000);
  }
  fprintf(stderr, "rank %d: no unique id in %s\n", rank, path);
  return 1;
}

/* An all_reduce (what) failed with r on comm. Without SCALE_SHRINK, or on a rank it
 * lists, that is the end (fail). Otherwise the rank goes on as torch's shrink_group
 * does on gonccl (csrc/shrink.cpp): the ranks not listed make a fresh communicator, one
 * generation (epoch) after comm's, numbered in their old order, whose new rank 0 hands
 * its unique id out through ID_FILE.shrink; then SCALE_SHRINK_OPS (default 3)
 * all_reduces of 1 MiB on it, each of which must be exact. It prints one line of JSON:
 * its old and new rank, the new size, the wall-clock times (seconds since the epoch) of
 * the failure and of the new communicator being ready, the time of each operation,
 * and whether all were exact; and exits 0 only if they were. comm stays until then, as
 * torch's old group does, so that its peers learn of the loss from the rank that saw
 * it, not from this one leaving; it is aborted at the end. */
static int op_failed(int rank, int nranks, const char* idfile, const char* what, goncclResult_t r, goncclComm_t comm) {
  int below, n;
  if (!getenv("SCALE_SHRINK") || shrink_listed(rank, &below, &n)) return fail(rank, what, r, comm);
  double t_error = wall();
  fprintf(stderr, "rank %d: %s: %s: %s\n", rank, what, goncclGetErrorString(r), goncclGetLastError(comm));
  uint32_t epoch = 0;
  goncclCommEpoch(comm, &epoch, NULL);
  int new_rank = rank - below, new_size = nranks - n;
  char path[4096];
  snprintf(path, sizeof path, "%s.shrink", idfile);
  goncclUniqueId id;
  if (share_id(new_rank, path, &id) != 0) return fail(rank, "shrink: unique id", goncclSystemError, comm);
  goncclComm_t nc;
  goncclResult_t nr = goncclCommInitRankEpoch(&nc, new_size, id, new_rank, 120000, epoch + 1);
  if (nr != goncclSuccess) return fail(rank, "shrink: init", nr, comm);
  double t_ready = wall();
  int ops = getenv("SCALE_SHRINK_OPS") ? atoi(getenv("SCALE_SHRINK_OPS")) : 3;
  int64_t* big = calloc(BIG_COUNT, sizeof(int64_t));
  if (!big) return fail(rank, "calloc", goncclSystemError, comm);
  int ok = 1;
  double t_ops = 0;
  for (int k = 0; k < ops; k++) {
    double t;
    if ((nr = timed_sum(big, BIG_COUNT, new_rank, nc, &t)) != goncclSuccess) {
      fprintf(stderr, "rank %d (new rank %d): all_reduce 1 MiB after the shrink: %s: %s\n", rank, new_rank,
              goncclGetErrorString(nr), goncclGetLastError(nc));
      goncclCommAbort(nc);
      return fail(rank, "after the shrink", nr, comm);
    }
    ok &= exact(big, BIG_COUNT, new_size);
    t_ops += t;
  }
  free(big);
  printf("{\"rank\": %d, \"new_rank\": %d, \"new_size\": %d, \"epoch\": %u, \"t_error\": %.6f, \"t_ready\": %.6f, "
         "\"ops\": %d, \"ops_s\": %.6f, \"exact\": %s}\n",
         rank, new_rank, new_size, epoch + 1, t_error, t_ready, ops, t_ops, ok ? "true" : "false");
  fflush(stdout);
  nr = goncclCommDestroy(nc);
  goncclCommAbort(comm);
  if (nr != goncclSuccess) {
    fprintf(stderr, "rank %d: destroy after the shrink: %s\n", rank, goncclGetErrorString(nr));
    return 1;
  }
  return ok ? 0 : 1;
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
  if (share_id(rank, argv[3], &id) != 0) return 1;
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
    if ((r = timed_sum(small, 1, rank, comm, &t_small[k])) != goncclSuccess)
      return op_failed(rank, nranks, argv[3], "all_reduce 8 B", r, comm);
    ok &= exact(small, 1, nranks);
  }
  int64_t* big = calloc(BIG_COUNT, sizeof(int64_t));
  if (!big) return fail(rank, "calloc", goncclSystemError, NULL);
  for (int k = 0; k < 2; k++) {
    if ((r = timed_sum(big, BIG_COUNT, rank, comm, &t_big[k])) != goncclSuccess)
      return op_failed(rank, nranks, argv[3], "all_reduce 1 MiB", r, comm);
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
        return op_failed(rank, nranks, argv[3], "all_reduce 1 MiB (loop)", r, comm);
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
