/*
 * ipcevent.c: the fake CUDA driver's inter-process events (see fakecuda_internal.h),
 * as CU_EVENT_INTERPROCESS events let ranks of one host order each other from the host:
 *
 * - cuEventCreate with CU_EVENT_INTERPROCESS (which, as on the real driver, needs
 *   CU_EVENT_DISABLE_TIMING) keeps the event's record and completion counts in a memfd
 *   page as well as in the event, published whenever they change (ev_sync);
 * - cuIpcGetEventHandle names that page (pid, fd); cuIpcOpenEventHandle maps it in
 *   another process (through /proc/<pid>/fd/<fd>; refused in the exporting process, as
 *   the real driver refuses it) as an imported event of the caller's context;
 * - an imported event can be queried (cuEventQuery: the exporter's last record has
 *   run), synchronized on, waited on by a stream (cuStreamWaitEvent: a GPU-side wait
 *   across contexts, counted in gpu_waits, which polls the page) and destroyed;
 * - for FAKECUDA_IPC_EVENT_LAG_US (default 2000) after the exporter changes the event's
 *   state (a record enqueued, a record run), another process still sees the state
 *   before: the driver documents no bound on how soon another process's query sees a
 *   newer record, so one that still reports the previous, completed record must not be
 *   taken to mean the newest has run.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* The 64 bytes of a CUipcEventHandle, as this fake fills them. */
typedef struct {
  unsigned magic;
  int pid;
  int fd;
  int dev;
  char pad[48];
} ipcEventHandle;

_Static_assert(sizeof(ipcEventHandle) == 64, "CUipcEventHandle is 64 bytes");

#define IPC_EVENT_MAGIC 0xfa4ee7e7U
#define PAGE 4096

/* The shared page of an inter-process event: [0] recorded, [1] completed (the newest
 * state), [2] and [3] the state before it, [4] when the newest was published
 * (CLOCK_MONOTONIC ns, one clock for every process), [5] a sequence count, odd while
 * the exporter writes. */
enum { SH_REC, SH_DONE, SH_PREV_REC, SH_PREV_DONE, SH_STAMP, SH_SEQ };

static unsigned long long mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

/* ipc_lag_ns: how long another process may still see an event's previous state
 * (FAKECUDA_IPC_EVENT_LAG_US, default 2000; 0: at once). The driver documents no bound
 * on how soon a query in another process sees a newer record: a query just after
 * cuEventRecord may still report the previous record, completed. */
static unsigned long long ipc_lag_ns(void) {
  static long lag = -1;
  if (lag < 0) {
    const char* v = getenv("FAKECUDA_IPC_EVENT_LAG_US");
    lag = (v != NULL && *v != 0) ? strtol(v, NULL, 10) : 2000;
    if (lag < 0) lag = 0;
  }
  return (unsigned long long)lag * 1000ull;
}

void ev_sync(fakeEvent* e) {
  if (e->shm == NULL) return;
  unsigned long* sh = e->shm;
  if (e->imported) {
    for (;;) {
      unsigned long seq = __atomic_load_n(&sh[SH_SEQ], __ATOMIC_ACQUIRE);
      if (seq & 1) continue; /* being written */
      unsigned long rec = __atomic_load_n(&sh[SH_REC], __ATOMIC_ACQUIRE);
      unsigned long done = __atomic_load_n(&sh[SH_DONE], __ATOMIC_ACQUIRE);
      unsigned long prec = __atomic_load_n(&sh[SH_PREV_REC], __ATOMIC_ACQUIRE);
      unsigned long pdone = __atomic_load_n(&sh[SH_PREV_DONE], __ATOMIC_ACQUIRE);
      unsigned long stamp = __atomic_load_n(&sh[SH_STAMP], __ATOMIC_ACQUIRE);
      if (__atomic_load_n(&sh[SH_SEQ], __ATOMIC_ACQUIRE) != seq) continue;
      if (mono_ns() - stamp < ipc_lag_ns()) { /* this process does not see the newest yet */
        rec = prec;
        done = pdone;
      }
      e->recorded = rec;
      e->completed = done;
      return;
    }
  }
  if (sh[SH_REC] == e->recorded && sh[SH_DONE] == e->completed) return;
  __atomic_add_fetch(&sh[SH_SEQ], 1, __ATOMIC_ACQ_REL);
  __atomic_store_n(&sh[SH_PREV_REC], sh[SH_REC], __ATOMIC_RELEASE);
  __atomic_store_n(&sh[SH_PREV_DONE], sh[SH_DONE], __ATOMIC_RELEASE);
  __atomic_store_n(&sh[SH_REC], e->recorded, __ATOMIC_RELEASE);
  __atomic_store_n(&sh[SH_DONE], e->completed, __ATOMIC_RELEASE);
  __atomic_store_n(&sh[SH_STAMP], mono_ns(), __ATOMIC_RELEASE);
  __atomic_add_fetch(&sh[SH_SEQ], 1, __ATOMIC_ACQ_REL);
}

CUresult ipc_event_create(fakeEvent* e) {
  int fd = memfd_create("fakecuda-ipc-event", MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, PAGE) != 0) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  e->shm = p;
  e->shm_fd = fd;
  return CUDA_SUCCESS;
}

CUresult cuIpcGetEventHandle(void* handle, void* ev) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  pthread_mutex_lock(&mu);
  fakeEvent* e = ev;
  if (e == NULL || e->magic != EVENT_MAGIC || e->destroyed) fault("cuIpcGetEventHandle(%p): not a live event", ev);
  if (e->shm == NULL || e->imported) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_VALUE; /* not created with CU_EVENT_INTERPROCESS here */
  }
  ipcEventHandle h = {IPC_EVENT_MAGIC, getpid(), e->shm_fd, e->ctx->dev, {0}};
  pthread_mutex_unlock(&mu);
  memcpy(handle, &h, sizeof h);
  return CUDA_SUCCESS;
}

/* The handle is passed by value: 64 bytes, which the C ABI passes in memory. */
typedef struct {
  char reserved[64];
} CUipcEventHandle;

CUresult cuIpcOpenEventHandle(void** out, CUipcEventHandle handle) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  ipcEventHandle h;
  memcpy(&h, &handle, sizeof h);
  if (h.magic != IPC_EVENT_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* as the real driver: not in the exporter */
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", h.pid, h.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE; /* the exporter exited */
  void* p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  fakeEvent* e = calloc(1, sizeof *e);
  e->ctx = t_current;
  e->shm = p;
  e->shm_fd = -1;
  e->imported = 1;
  pthread_mutex_lock(&mu);
  e->gen = e->ctx->gen;
  e->magic = EVENT_MAGIC;
  ev_sync(e);
  g_count.events_created++;
  pthread_mutex_unlock(&mu);
  *out = e;
  return CUDA_SUCCESS;
}

/* run_ipc_wait holds its stream until the imported event's record of when the wait
 * was queued (arg[0]) has run in the exporting process. mu held; released to poll. */
static void run_ipc_wait(op* o) {
  fakeEvent* e = o->ev;
  for (;;) {
    ts_hold(o->stream->ctx->dev); /* a waiting stream keeps (or takes back) its turn */
    ev_sync(e);
    if (e->completed >= o->gen) return;
    pthread_mutex_unlock(&mu);
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&mu);
  }
}

void ipc_stream_wait(fakeStream* s, fakeEvent* e) {
  ev_sync(e);
  op* o = calloc(1, sizeof *o);
  o->kind = OP_CALL;
  o->call = run_ipc_wait;
  o->ev = e;
  o->gen = e->recorded;
  push(s, o);
}
