/*
 * timeslice.c: contexts of one device take turns, as on a GPU without MPS (see
 * fakecuda_internal.h). Off unless FAKECUDA_TIMESLICE_US is set (the slice, in
 * microseconds) together with FAKECUDA_TIMESLICE_KEY (names the machine: processes
 * with the same key share the fake devices' turns, so concurrent tests do not).
 *
 * A device's turn lives in a small shared file, /dev/shm/fakecuda-ts-<key>-<dev>: the
 * pid of the process whose context holds it (each process has one context per device)
 * and when its slice began. An op runs only while its process holds the turn
 * (ts_enter). A process gives the turn up as soon as it has no op running on the
 * device (ts_leave); a waiting process takes it once the holder's slice has ended. A
 * stream that waits (cuStreamWaitValue32, cuStreamWaitEvent) is running: it keeps the
 * turn for the rest of its slice even though it does nothing, and once another context
 * has taken the turn it waits for it back before it can finish (ts_hold). So a GPU-side
 * wait for another context's work costs about a slice, as on the hardware.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  int owner;       /* pid holding the turn, 0: nobody */
  int last;        /* pid that held it last */
  long long start; /* CLOCK_MONOTONIC ns when the holder's slice began */
} turn;

static int g_ts_init;             /* 1: read the settings (mu held) */
static long long g_slice_ns;      /* 0: time-slicing off */
static char g_key[64];
static turn* g_turn[NDEV];        /* mapped on first use */
static int g_running[NDEV];       /* ops of this process running on the device */

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* device_turn returns dev's shared turn, or NULL when time-slicing is off. mu held. */
static turn* device_turn(int dev) {
  if (!g_ts_init) {
    g_ts_init = 1;
    const char* us = getenv("FAKECUDA_TIMESLICE_US");
    const char* key = getenv("FAKECUDA_TIMESLICE_KEY");
    if (us != NULL && atol(us) > 0 && key != NULL && key[0] != '\0') {
      g_slice_ns = atol(us) * 1000LL;
      snprintf(g_key, sizeof g_key, "%s", key);
    }
  }
  if (g_slice_ns == 0 || dev < 0 || dev >= NDEV) return NULL;
  if (g_turn[dev] == NULL) {
    char path[128];
    snprintf(path, sizeof path, "/dev/shm/fakecuda-ts-%s-%d", g_key, dev);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) fault("FAKECUDA_TIMESLICE_KEY: cannot open %s", path);
    if (ftruncate(fd, 4096) != 0) fault("FAKECUDA_TIMESLICE_KEY: cannot size %s", path);
    void* p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) fault("FAKECUDA_TIMESLICE_KEY: cannot map %s", path);
    g_turn[dev] = p;
  }
  return g_turn[dev];
}

/* take tries once to hold t's turn for this process. */
static int take(turn* t) {
  int me = getpid();
  int o = __atomic_load_n(&t->owner, __ATOMIC_ACQUIRE);
  if (o == me) return 1;
  int expired = o != 0 && (now_ns() - __atomic_load_n(&t->start, __ATOMIC_ACQUIRE) > g_slice_ns ||
                           (kill(o, 0) != 0 && errno == ESRCH));
  if (o != 0 && !expired) return 0;
  if (!__atomic_compare_exchange_n(&t->owner, &o, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 0;
  __atomic_store_n(&t->start, now_ns(), __ATOMIC_RELEASE);
  int last = __atomic_exchange_n(&t->last, me, __ATOMIC_ACQ_REL);
  if (last != 0 && last != me) g_count.ts_switches++;
  return 1;
}

/* acquire waits (mu released while it sleeps) until this process holds t's turn. */
static void acquire(turn* t) {
  for (int i = 0; !take(t); i++) {
    pthread_mutex_unlock(&mu);
    if (i < 200) {
      sched_yield(); /* the holder usually gives the turn up within microseconds */
    } else {
      struct timespec ts = {0, 10000};
      nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&mu);
  }
}

void ts_enter(int dev) {
  turn* t = device_turn(dev);
  if (t == NULL) return;
  acquire(t);
  g_running[dev]++;
}

void ts_hold(int dev) {
  turn* t = device_turn(dev);
  if (t != NULL) acquire(t);
}

void ts_leave(int dev) {
  turn* t = device_turn(dev);
  if (t == NULL) return;
  if (--g_running[dev] > 0) return;
  int me = getpid();
  __atomic_compare_exchange_n(&t->owner, &me, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}
