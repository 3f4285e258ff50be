/*
 * hwqueue.c: the fake CUDA driver's hardware queues (see fakecuda_internal.h).
 *
 * A real GPU runs a context's streams through a few hardware queues (connections):
 * CUDA_DEVICE_MAX_CONNECTIONS of them (default 8, 1 to 32; Megatron-style training sets
 * 1), the streams mapped onto them round-robin as they are created. A queue runs its
 * work in the order it was submitted, whatever stream it came from: an operation that
 * waits (cuStreamWaitValue32, cuStreamWaitEvent) at the head of a queue holds back
 * everything queued behind it there, other streams' work included. So two streams are
 * independent only while they sit on different queues, and at one connection none are.
 *
 * The fake does the same: each context's streams take queues round-robin (the legacy
 * default stream and the pool streams included, in the order they are made), every
 * operation pushed gets a ticket in its queue, and an operation starts only once every
 * operation before it in its queue has run. The variable is read once, at the first
 * stream.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"

#include <stdio.h>
#include <stdlib.h>

#define MAX_QUEUES 32

typedef struct hwq {
  unsigned long pushed, done; /* tickets given out, operations run */
} hwq;

static int g_nqueues;                     /* 0 until read */
static hwq g_queues[NDEV][MAX_QUEUES];    /* guarded by mu */
static unsigned g_next_queue[NDEV];       /* the next stream's queue, round-robin */

static int nqueues(void) {
  if (g_nqueues == 0) {
    const char* v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    int n = v != NULL && *v != 0 ? atoi(v) : 8;
    g_nqueues = n < 1 ? 1 : n > MAX_QUEUES ? MAX_QUEUES : n;
  }
  return g_nqueues;
}

int hwq_assign(fakeCtx* ctx) { return (int)(g_next_queue[ctx->dev]++ % (unsigned)nqueues()); }

void hwq_push(fakeStream* s, op* o) { o->qticket = ++g_queues[s->ctx->dev][s->hwq].pushed; }

int hwq_turn(const op* o) { return g_queues[o->stream->ctx->dev][o->stream->hwq].done + 1 == o->qticket; }

void hwq_done(const op* o) { g_queues[o->stream->ctx->dev][o->stream->hwq].done++; }

int fakecudaHardwareQueues(void) {
  pthread_mutex_lock(&mu);
  int n = nqueues();
  pthread_mutex_unlock(&mu);
  return n;
}
