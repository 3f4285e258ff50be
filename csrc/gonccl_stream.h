/*
 * gonccl_stream.h: the part of the C ABI the CUDA path of the torch backend
 * needs beyond what capi/gonccl.h declared when this file was written.
 *
 * goncclRequestWaitStream blocks the CPU until the request's host part is
 * done (returning the op's error if it failed), then makes waiter (a
 * cudaStream_t) wait on the op's completion event; waiter NULL waits on the
 * host only.
 *
 * csrc resolves it with dlsym like every other entry point (library.cpp), so
 * a libgonccl.so without it still loads and a CUDA op says which symbol is
 * missing. Once capi/gonccl.h declares it, this identical redeclaration stays
 * harmless and this file can go.
 */
#ifndef GONCCL_STREAM_H_
#define GONCCL_STREAM_H_

#include "gonccl.h"

#ifdef __cplusplus
extern "C" {
#endif

goncclResult_t goncclRequestWaitStream(goncclRequest_t req,
                                       goncclStream_t waiter);

#ifdef __cplusplus
}
#endif

#endif /* GONCCL_STREAM_H_ */
