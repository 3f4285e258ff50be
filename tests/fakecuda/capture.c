/*
 * capture.c: the fake CUDA driver's stream capture modes (see fakecuda_internal.h), as
 * the real driver enforces them.
 *
 * "Potentially unsafe" calls (cuEventQuery, cuEventSynchronize, cuStreamSynchronize,
 * cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost) are forbidden, by the calling
 * thread's own mode: in CU_STREAM_CAPTURE_MODE_GLOBAL (every thread's until it exchanges
 * it with cuThreadExchangeStreamCaptureMode, as torch's CUDAStreamCaptureModeGuard
 * does) while this thread captures in a mode other than RELAXED or another thread
 * captures in GLOBAL mode (torch.cuda.graph's default); in THREAD_LOCAL mode while this
 * thread captures in a mode other than RELAXED; in RELAXED mode never. A forbidden call
 * fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the captures that
 * forbade it, which then end with an error.
 *
 * The test hooks (fakecuda*) stand for the test's own bookkeeping and never invalidate
 * a capture; fakecudaBeginCapture begins one in GLOBAL mode, on the calling thread.
 */
#define _GNU_SOURCE
#include "fakecuda_internal.h"

#include <pthread.h>
#include <stdio.h>

enum { MODE_GLOBAL = 0, MODE_THREAD_LOCAL = 1, MODE_RELAXED = 2 };

#define MAX_CAPTURES 64

typedef struct capture {
  void* stream; /* NULL: a free entry */
  int mode;
  pthread_t owner;
  int invalidated;
} capture;

static capture g_captures[MAX_CAPTURES]; /* guarded by mu */
static long g_invalidated;               /* captures invalidated, ever */
static __thread int t_mode = MODE_GLOBAL;
__thread int t_hook; /* inside a test hook: its calls never invalidate a capture */

CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
  CALLED();
  if (mode == NULL || *mode < MODE_GLOBAL || *mode > MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  int old = t_mode;
  t_mode = *mode;
  *mode = old;
  return CUDA_SUCCESS;
}

/* capture_begin records that stream s is captured in mode by the calling thread. mu
 * held. */
void capture_begin(void* s, int mode) {
  for (int i = 0; i < MAX_CAPTURES; i++) {
    if (g_captures[i].stream == NULL) {
      g_captures[i] = (capture){s, mode, pthread_self(), 0};
      return;
    }
  }
  fault("more than %d streams under capture at once", MAX_CAPTURES);
}

/* capture_end ends s's capture: 1 if it was invalidated meanwhile, else 0. mu held. */
int capture_end(void* s) {
  for (int i = 0; i < MAX_CAPTURES; i++) {
    if (g_captures[i].stream == s) {
      int bad = g_captures[i].invalidated;
      g_captures[i].stream = NULL;
      return bad;
    }
  }
  return 0;
}

/* capture_unsafe is called first by every potentially unsafe entry point fn: it fails
 * the call with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, invalidating the captures that
 * forbid it to this thread, if any. mu not held. */
CUresult capture_unsafe(const char* fn) {
  if (t_mode == MODE_RELAXED || t_hook) return CUDA_SUCCESS;
  pthread_t self = pthread_self();
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < MAX_CAPTURES; i++) {
    capture* c = &g_captures[i];
    if (c->stream == NULL) continue;
    int own = pthread_equal(c->owner, self);
    if ((own && c->mode != MODE_RELAXED) || (!own && c->mode == MODE_GLOBAL && t_mode == MODE_GLOBAL)) {
      if (!c->invalidated) {
        fprintf(stderr,
                "fakecuda: %s on a thread in %s capture mode during a %s-mode capture of stream %p%s: "
                "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, the capture is invalidated\n",
                fn, t_mode == MODE_GLOBAL ? "global" : "thread-local", c->mode == MODE_GLOBAL ? "global" : "thread-local",
                c->stream, own ? " by this thread" : " by another thread");
        g_invalidated++;
      }
      c->invalidated = 1;
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  pthread_mutex_unlock(&mu);
  return r;
}

long fakecudaCapturesInvalidated(void) {
  pthread_mutex_lock(&mu);
  long n = g_invalidated;
  pthread_mutex_unlock(&mu);
  return n;
}
