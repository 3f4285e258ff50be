/*
 * goncclGetLastError from many threads while others fail: every string it returns
 * must stay readable, unchanged, for as long as gonccl.h promises (until the same
 * thread calls goncclGetLastError again), whatever other threads do meanwhile.
 *
 * FAILERS threads make calls fail on one communicator (and with no communicator) as
 * fast as they can, each failure replacing the last-error message; READERS threads
 * fetch the message, then read it again and again while the failers run, checking that
 * it is still one of the messages the failures produce, byte for byte. A string freed
 * or rewritten under a reader shows as a mismatch (or, built with
 * -fsanitize=address, as a heap-use-after-free report). Run as one process:
 *     last_error_test SECONDS
 * Exit status 0 means every check passed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gonccl.h"
#include "test_harness.h"

enum { FAILERS = 4, READERS = 4 };

static goncclComm_t comm;
static atomic_int stop;
static atomic_long reads, fails;

/* The messages the failing calls below leave (as substrings: the message also names
 * the call). */
static const char* const expected[] = {"count is NULL", "rank is NULL", "version is NULL",
                                       "uniqueId is NULL"};

/* EXPECT_T: CHECK for the threads (no shared counter). */
#define EXPECT_T(cond, ...)                                                 \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "rank 0: FAILED %s:%d: ", __FILE__, __LINE__);        \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static int known(const char* s) {
  for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
    if (strstr(s, expected[i])) return 1;
  return 0;
}

static void* failer(void* arg) {
  long k = (long)arg;
  while (!atomic_load(&stop)) {
    switch (k++ % 4) {
      case 0: (void)goncclCommCount(comm, NULL); break;
      case 1: (void)goncclCommUserRank(comm, NULL); break;
      case 2: (void)goncclGetVersion(NULL); break;
      default: (void)goncclGetUniqueId(NULL); break;
    }
    atomic_fetch_add(&fails, 1);
  }
  return NULL;
}

static void* reader(void* arg) {
  goncclComm_t c = arg ? comm : NULL;
  char copy[4096];
  while (!atomic_load(&stop)) {
    const char* s = goncclGetLastError(c);
    EXPECT_T(s != NULL, "goncclGetLastError returned NULL");
    size_t n = strlen(s);
    EXPECT_T(n < sizeof copy, "message of %zu bytes", n);
    memcpy(copy, s, n + 1);
    if (n == 0) continue; /* nothing failed yet */
    EXPECT_T(known(copy), "goncclGetLastError gave an unexpected message: \"%s\"", copy);
    /* Keep reading the same pointer while the failers replace the message: it must not
     * change under us. */
    for (int i = 0; i < 200; i++) {
      EXPECT_T(strcmp(s, copy) == 0, "the string changed while held: \"%s\" became \"%.200s\"", copy,
            s);
      atomic_fetch_add(&reads, 1);
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
    return 2;
  }
  double seconds = atof(argv[1]);
  (void)share_id; /* one process: no id to share */
  rank = 0;
  nranks = 1;
  goncclUniqueId id;
  OK(goncclGetUniqueId(&id), NULL);
  OK(goncclCommInitRank(&comm, 1, id, 0), NULL);

  pthread_t f[FAILERS], r[READERS];
  for (long i = 0; i < FAILERS; i++) CHECK(pthread_create(&f[i], NULL, failer, (void*)i) == 0, "pthread_create");
  for (long i = 0; i < READERS; i++)
    CHECK(pthread_create(&r[i], NULL, reader, (void*)(i % 2)) == 0, "pthread_create");
  usleep((useconds_t)(seconds * 1e6));
  atomic_store(&stop, 1);
  for (int i = 0; i < FAILERS; i++) pthread_join(f[i], NULL);
  for (int i = 0; i < READERS; i++) pthread_join(r[i], NULL);

  /* The strings stay valid across other threads' calls, and a thread's own next
   * goncclGetLastError is what ends them (documented): a fresh call sees the latest. */
  (void)goncclCommCount(comm, NULL);
  const char* s = goncclGetLastError(comm);
  CHECK(strstr(s, "count is NULL"), "last error after a failure: \"%s\"", s);
  OK(goncclCommDestroy(comm), NULL);
  CHECK(atomic_load(&reads) > 0 && atomic_load(&fails) > 0, "no reads (%ld) or failures (%ld)",
        atomic_load(&reads), atomic_load(&fails));
  printf("rank 0: %ld failures, %ld reads: %d checks passed\n", atomic_load(&fails), atomic_load(&reads),
         checks);
  return 0;
}
