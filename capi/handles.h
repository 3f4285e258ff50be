/* Private to capi: the C side of the handles gonccl.h leaves opaque, and the trampoline
 * through which Go calls a user's completion callback. */
#ifndef GONCCL_HANDLES_H_
#define GONCCL_HANDLES_H_
#define GONCCL_NO_PROTOTYPES
#include <stdlib.h>
#include "gonccl.h"

struct goncclComm { unsigned long long id; };
struct goncclRequest { unsigned long long id; };
struct goncclWindow { unsigned long long id; };

/* lasterror.c: copies s (n bytes) into the calling thread's own buffer. */
const char* goncclThreadErrorCopy(const char* s, size_t n);

static inline void goncclInvokeCallback(goncclCallback_t fn, void* arg, goncclResult_t r) {
  fn(arg, r);
}
#endif
