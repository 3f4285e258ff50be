/*
 * event.c: the fake CUDA driver's events (see fakecuda_internal.h): records queued on
 * a stream with a generation each, queries and waits from the host, and
 * cuStreamWaitEvent, an op that holds its stream until the generation has run.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

/* event returns the live event h, or faults as the real driver would crash on a
 * destroyed event (its memory freed) or on one of a reset context. Events are never
 * freed, so a destroyed one can still be recognized. mu held. */
static fakeEvent* event(void* h, const char* fn) {
  fakeEvent* e = h;
  if (e == NULL || e->magic != EVENT_MAGIC) fault("%s(%p): not an event", fn, h);
  if (e->destroyed) fault("%s(%p): the event was destroyed", fn, h);
  if (!ctx_alive(e->ctx, e->gen)) fault("%s(%p): the event's context (device %d) was reset", fn, h, e->ctx->dev);
  return e;
}

CUresult cuEventCreate(void** ev, unsigned int flags) {
  CALLED();
  CUresult r = need_ctx();
  if (r) return r;
  fakeEvent* e = calloc(1, sizeof *e);
  e->ctx = t_current;
  pthread_mutex_lock(&mu);
  if (flags & 0x4) { /* CU_EVENT_INTERPROCESS (ipcevent.c) */
    r = ipc_event_create(e);
    if (r) {
      pthread_mutex_unlock(&mu);
      free(e);
      return r;
    }
  }
  e->gen = e->ctx->gen;
  e->magic = EVENT_MAGIC;
  g_count.events_created++;
  pthread_mutex_unlock(&mu);
  *ev = e;
  return CUDA_SUCCESS;
}

CUresult cuEventRecord(void* ev, void* stream) {
  CALLED();
  pthread_mutex_lock(&mu);
  fakeEvent* e = event(ev, "cuEventRecord");
  fakeStream* s = NULL;
  if (resolve(stream, &s) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (e->ctx != s->ctx) {
    g_count.context_errors++;
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  op* o = calloc(1, sizeof *o);
  o->kind = OP_RECORD;
  o->ev = e;
  /* A record into a graph under capture is a node of the graph, not a record. */
  o->gen = s->capturing ? e->recorded : ++e->recorded;
  ev_sync(e);
  push(s, o);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(void* ev) {
  CALLED();
  CUresult c = capture_unsafe("cuEventQuery");
  if (c) return c;
  pthread_mutex_lock(&mu);
  fakeEvent* e = event(ev, "cuEventQuery");
  ev_sync(e);
  CUresult r = e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuEventSynchronize(void* ev) {
  CALLED();
  CUresult c = capture_unsafe("cuEventSynchronize");
  if (c) return c;
  pthread_mutex_lock(&mu);
  fakeEvent* e = event(ev, "cuEventSynchronize");
  ev_sync(e);
  unsigned long want = e->recorded;
  while (e->completed < want) {
    if (e->imported) { /* another process completes it: poll */
      pthread_mutex_unlock(&mu);
      usleep(20);
      pthread_mutex_lock(&mu);
      ev_sync(e);
    } else {
      pthread_cond_wait(&cv, &mu);
    }
  }
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(void* ev) {
  CALLED();
  pthread_mutex_lock(&mu);
  fakeEvent* e = event(ev, "cuEventDestroy");
  /* Kept (never freed): a queued wait may still read it, as the real driver allows. */
  e->destroyed = 1;
  g_count.events_destroyed++;
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(void* stream, void* ev, unsigned int flags) {
  CALLED();
  (void)flags;
  pthread_mutex_lock(&mu);
  fakeEvent* e = event(ev, "cuStreamWaitEvent");
  fakeStream* s = NULL;
  if (resolve(stream, &s) != CUDA_SUCCESS) {
    pthread_mutex_unlock(&mu);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (e->ctx != s->ctx || e->imported) g_count.gpu_waits++;
  if (e->imported) {
    ipc_stream_wait(s, e);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
  }
  op* o = calloc(1, sizeof *o);
  o->kind = OP_WAIT;
  o->ev = e;
  o->gen = e->recorded;
  push(s, o);
  pthread_mutex_unlock(&mu);
  return CUDA_SUCCESS;
}
