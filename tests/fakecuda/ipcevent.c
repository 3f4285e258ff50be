/*
 * ipcevent.c: the fake CUDA driver's inter-process events (see fakecuda_internal.h),
 * as CU_EVENT_INTERPROCESS events let ranks of one host order each other from the host:
 *
 * - cuEventCreate with CU_EVENT_INTERPROCESS (which, as on the real driver, needs
 *   CU_EVENT_DISABLE_TIMING) keeps the event's record and completion counts in a memfd
 *   page as well as in the event, published whenever they change (ev_sync);
 * - cuIpcGetEventHandle names that page (pid, fd); cuIpcOpenEventHandle maps it in
 *   another process (through /proc/<pid>/fd/<fd>; refused in the exporting process, as
 *   the real driver refuses it) as an imported event of the caller's context
 *   (FAKECUDA_IPC_EVENT_OPEN_ERROR=<CUresult> refuses every open in this process);
 * - an imported event can be queried (cuEventQuery: the exporter's last record has
 *   run), synchronized on, waited on by a stream (cuStreamWaitEvent: a GPU-side wait
 *   across contexts, counted in gpu_waits, which polls the page) and destroyed.
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

void ev_sync(fakeEvent* e) {
  if (e->shm == NULL) return;
  if (e->imported) {
    e->recorded = __atomic_load_n(&e->shm[0], __ATOMIC_ACQUIRE);
    e->completed = __atomic_load_n(&e->shm[1], __ATOMIC_ACQUIRE);
  } else {
    __atomic_store_n(&e->shm[0], e->recorded, __ATOMIC_RELEASE);
    __atomic_store_n(&e->shm[1], e->completed, __ATOMIC_RELEASE);
  }
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
  CUresult r = need_ctx();
  if (r) return r;
  ipcEventHandle h;
  memcpy(&h, &handle, sizeof h);
  if (h.magic != IPC_EVENT_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT; /* as the real driver: not in the exporter */
  /* A process that cannot open another's handles (another container's pid namespace,
   * a driver that refuses): the CUresult to return, for tests of a refusal on one rank. */
  const char* fail = getenv("FAKECUDA_IPC_EVENT_OPEN_ERROR");
  if (fail != NULL && *fail != 0) return (CUresult)atoi(fail);
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
