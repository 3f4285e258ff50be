/*
 * fakecuda.h: test hooks of the fake CUDA driver (the .c files of tests/fakecuda; what it
 * models and which file holds what: fakecuda_internal.h).
 *
 * The fake stands in for libcuda.so.1 in tests (GONCCL_CUDA_LIBRARY=path/to/it): host
 * memory stands in for device memory; every stream is an ordered queue run by its own
 * thread, with a configurable delay per queued operation, so asynchrony and ordering
 * bugs show up. It exports the driver entry points gonccl's cuda package dlsyms, and
 * the hooks below, which a test reaches by linking the same shared object (the dynamic
 * loader then hands gonccl's dlopen the very same copy).
 */
#ifndef FAKECUDA_H_
#define FAKECUDA_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  long dtoh, htod;         /* copies executed */
  long kernels;            /* fake kernels executed */
  long host_allocs, host_frees, host_live; /* cuMemHostAlloc / cuMemFreeHost */
  long events_created, events_destroyed;
  long bad_access;         /* a queued op touched freed or unknown memory when it ran */
  long host_races;         /* a copy was queued on host memory another stream's pending op uses */
  long context_errors;     /* calls refused for a missing or wrong current context */
  long stale_reads;        /* fakecudaCheckF32 kernels that found another value */
  long captured_ops;       /* operations queued on a capturing stream (never run) */
  long primary_retained;   /* cuDevicePrimaryCtxRetain calls not yet released */
  long primary_resets;     /* primary contexts reset (their last reference released) */
  long gpu_waits;          /* GPU-side waits another context may release: cuStreamWaitValue32,
                            * cuStreamWaitEvent on another context's or process's event */
  long ts_switches;        /* FAKECUDA_TIMESLICE_US: turns this process took after another's */
} fakecudaCounters;

/* "Device" memory of device dev (malloc'd host memory, tracked). */
void* fakecudaMalloc(int dev, size_t bytes);
/* Frees it: the memory is poisoned (0xDB) and kept, so later use is detected. Returns 0,
 * or -1 if p is not a live allocation. */
int fakecudaFree(void* p);
/* A stream on device dev (its context is that device's), run by its own thread:
 * a blocking stream (flags 0, synchronizes with the legacy default stream) or, with
 * flags CU_STREAM_NON_BLOCKING (0x1), one that does not, like torch's streams. */
void* fakecudaStreamCreate(int dev);
void* fakecudaStreamCreateWithFlags(int dev, unsigned flags);
/* Every operation of stream runs us later than it would (copies that really run late). */
int fakecudaStreamSetDelay(void* stream, unsigned us);
/* Stream capture on stream: until fakecudaEndCapture, what is queued there is not run. */
int fakecudaBeginCapture(void* stream);
int fakecudaEndCapture(void* stream);
/* fakecudaBeginCapture in capture mode mode (0 global, as fakecudaBeginCapture; 1
 * thread-local; 2 relaxed), on the calling thread; fakecudaEndCapture returns -2 for a
 * capture that another thread's (or this one's) potentially unsafe call invalidated. */
int fakecudaBeginCaptureMode(void* stream, int mode);
/* The hardware queues each context's streams share: CUDA_DEVICE_MAX_CONNECTIONS (default
 * 8), read at the first stream. */
int fakecudaHardwareQueues(void);
/* How many captures such calls have invalidated. */
long fakecudaCapturesInvalidated(void);
/* The context of device dev, for cuCtxSetCurrent. */
void* fakecudaContext(int dev);
/* Delay of every queued operation: uniformly random in [min_us, max_us]. */
void fakecudaSetDelay(unsigned min_us, unsigned max_us);
/* Host<->device copies also take their size at mib_per_s MiB/s, sleeping (a copy engine
 * that costs no CPU: for benchmarks of overlap); 0, the default: no such time. */
void fakecudaSetCopyRate(unsigned mib_per_s);
/* Fake kernels: after delay_us on the stream, set or add value to count floats at p. */
int fakecudaFillF32(void* stream, void* p, size_t count, float value, unsigned delay_us);
int fakecudaAddF32(void* stream, void* p, size_t count, float value, unsigned delay_us);
/* A consumer: after delay_us on the stream, counts a stale read if any of count floats
 * at p differs from want. */
int fakecudaCheckF32(void* stream, void* p, size_t count, float want, unsigned delay_us);
/* Stream handles may be NULL, CU_STREAM_LEGACY (0x1) or CU_STREAM_PER_THREAD (0x2):
 * they resolve on the calling thread, which needs a current context (cuCtxSetCurrent). */
/* The CUDA runtime's reference on dev's primary context, as torch's first CUDA call
 * takes it (fakecudaContext, fakecudaStreamCreate* and fakecudaMalloc imply it), and its
 * release (cudaDeviceReset, or the runtime's teardown at exit): when no reference is
 * left the context is reset and its streams, events and memory die. 0, or -1 for a
 * bad device or a release without the reference. */
int fakecudaRuntimeInit(int dev);
int fakecudaRuntimeRelease(int dev);
/* torch's stream pool (getStreamFromPool): 32 non-blocking streams of dev handed out
 * round-robin to every caller, so two callers may share one. */
void* fakecudaPoolStream(int dev);
/* Blocks until all work queued on stream has run. */
int fakecudaStreamDrain(void* stream);
void fakecudaGetCounters(fakecudaCounters* out);
/* Launches of the kernel called name run a deliberately wrong implementation (it misses
 * the last element) until called again with another name or NULL (module.c). Returns
 * -1 if no kernel is called name. */
int fakecudaCorruptKernel(const char* name);

#ifdef __cplusplus
}
#endif
#endif
