// Per-thread copies of error messages for goncclGetLastError (see gonccl.h): each
// thread that asks gets its own buffer, which only its own next call rewrites and
// which is freed when the thread exits, so no other thread's failure can free or
// change a string while it is being read.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "handles.h"

struct lastErrorBuf {
  char* p;
  size_t cap;
};

static pthread_key_t lastErrorKey;
static pthread_once_t lastErrorOnce = PTHREAD_ONCE_INIT;
static int lastErrorKeyOK;

static void lastErrorFree(void* v) {
  struct lastErrorBuf* b = v;
  free(b->p);
  free(b);
}

static void lastErrorInit(void) { lastErrorKeyOK = pthread_key_create(&lastErrorKey, lastErrorFree) == 0; }

const char* goncclThreadErrorCopy(const char* s, size_t n) {
  static const char empty[] = "";
  static const char nomem[] = "out of memory copying the error message";
  pthread_once(&lastErrorOnce, lastErrorInit);
  if (!lastErrorKeyOK) return nomem;
  struct lastErrorBuf* b = pthread_getspecific(lastErrorKey);
  if (b == NULL) {
    b = calloc(1, sizeof *b);
    if (b == NULL || pthread_setspecific(lastErrorKey, b) != 0) {
      free(b);
      return nomem;
    }
  }
  if (n == 0) return empty;
  if (b->cap < n + 1) {
    char* p = realloc(b->p, n + 1);
    if (p == NULL) return nomem;
    b->p = p;
    b->cap = n + 1;
  }
  memcpy(b->p, s, n);
  b->p[n] = 0;
  return b->p;
}
