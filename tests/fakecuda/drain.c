/*
 * drain.c: allocation and free synchronize (see strict.h). On a real GPU cuMemFree,
 * cuMemHostAlloc and cuMemFreeHost (and, in practice, cuMemAlloc when it must return
 * memory to the device first), cuMemHostRegister, cuMemHostUnregister and
 * cuIpcCloseMemHandle wait for all work of the context, and so does the first
 * launch of a kernel the driver loads lazily: code that allocates or frees while a
 * stream of the process waits on a flag deadlocks there. The fake does the same, and
 * says which stream held it up instead of hanging silently.
 */
#define _GNU_SOURCE
#include "strict.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

fakecudaStrictCounters g_strict;

/* The longest a drain waits with no stream making progress. */
static long drain_timeout_ms(void) {
  const char* e = getenv("FAKECUDA_DRAIN_TIMEOUT_MS");
  long ms = (e && *e) ? strtol(e, NULL, 10) : 0;
  return ms > 0 ? ms : 20000; /* long enough for a slow peer on a loaded machine */
}

typedef struct {
  fakeStream* s;
  unsigned long ticket, seen;
} pending;

static void describe(fakeStream* s, char* buf, size_t n) {
  op* o = s->head;
  if (o == NULL) {
    snprintf(buf, n, "nothing (it is idle)");
  } else if (describe_wait(o, buf, n)) {
    /* written */
  } else if (o->kind == OP_WAIT) {
    snprintf(buf, n, "cuStreamWaitEvent on event %p, record %lu, not yet run", (void*)o->ev, o->gen);
  } else {
    snprintf(buf, n, "an operation that waits on other streams (kind %d)", o->kind);
  }
}

void drain_ctx(const char* call) {
  pthread_mutex_lock(&mu);
  g_strict.drains++;
  fakeCtx* ctx = t_current;
  int n = 0;
  for (fakeStream* s = g_streams; s; s = s->next) n++;
  pending* ps = calloc((size_t)n + 1, sizeof *ps);
  int k = 0;
  for (fakeStream* s = g_streams; s; s = s->next) {
    if (s->ctx != ctx || !ctx_alive(s->ctx, s->gen) || s->done >= s->pushed) continue;
    ps[k].s = s;
    ps[k].ticket = s->pushed;
    ps[k].seen = s->done;
    k++;
  }
  long limit = drain_timeout_ms();
  struct timespec last;
  clock_gettime(CLOCK_MONOTONIC, &last);
  for (;;) {
    int left = 0;
    for (int i = 0; i < k; i++) {
      if (ps[i].s->done >= ps[i].ticket) continue;
      left = 1;
      if (ps[i].s->done != ps[i].seen) { /* progress: the wait starts over */
        ps[i].seen = ps[i].s->done;
        clock_gettime(CLOCK_MONOTONIC, &last);
      }
    }
    if (!left) break;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long waited = (now.tv_sec - last.tv_sec) * 1000 + (now.tv_nsec - last.tv_nsec) / 1000000;
    if (waited >= limit) {
      for (int i = 0; i < k; i++) {
        if (ps[i].s->done >= ps[i].ticket) continue;
        char what[256];
        describe(ps[i].s, what, sizeof what);
        fault("%s waits for all work of the context (as the real driver does), but stream %p has made no progress for "
              "%ld ms: it is blocked on %s. Do not allocate or free while a stream may wait",
              call, (void*)ps[i].s, waited, what);
      }
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 5 * 1000000;
    if (until.tv_nsec >= 1000000000) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&cv, &mu, &until);
  }
  free(ps);
  pthread_mutex_unlock(&mu);
}

/* ---- test hooks ---- */

void fakecudaGetStrictCounters(fakecudaStrictCounters* out) {
  pthread_mutex_lock(&mu);
  *out = g_strict;
  pthread_mutex_unlock(&mu);
}
