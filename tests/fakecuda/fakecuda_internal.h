/*
 * fakecuda_internal.h: what the parts of the fake CUDA driver share (tests use
 * fakecuda.h, not this).
 *
 * Build (tests/test_cuda_capi.py does), from tests/fakecuda:
 *     gcc -shared -fPIC -O1 -pthread -o libfakecuda.so *.c *.cc
 *
 * The parts: context.c (initialization, error names, contexts, primary contexts, the
 * counters and the state all parts share), memory.c (device and pinned allocations,
 * pointer attributes, copies), stream.c (the stream queues and their threads, the
 * special handles, capture, delays, fake kernels), event.c (events and
 * cuStreamWaitEvent), module.c (modules, cuLaunchKernel of gonccl's kernels, whose
 * host implementations kernels_host.cc compiles from cuda/kernels/reduce.cuh), ipc.c
 * (shareable device memory, IPC handles, device copies, stream memory operations),
 * vmm.c (cuMemCreate memory exported as file descriptors, which outlives its maker,
 * mapped with cuMemAddressReserve/cuMemMap/cuMemSetAccess),
 * pool.c (stream-ordered pool memory: cuMemAllocAsync, cuMemFreeAsync),
 * hwqueue.c (the hardware queues a context's streams share), capture.c (capture modes),
 * hostreg.c (host memory registered for the device), standin.c (what
 * tests/capi/realcuda.c calls beyond that, so the fake can stand in for libcuda.so.1
 * under it: tests/test_realcuda_link.py), and the stricter parts that strict.h
 * declares: drain.c (allocation, free and lazy loads wait for the context), deadpeer.c
 * (memory shared between processes dies with its exporter) and visible.c
 * (CUDA_VISIBLE_DEVICES: ordinals are per process, bus ids per physical GPU).
 *
 * What it models, so that gonccl's staging logic is exercised for real:
 * - device memory: malloc'd host memory in a table of allocations with a device ordinal;
 *   copies check their device range against it when queued (CUDA_ERROR_INVALID_VALUE)
 *   and again when they run (bad_access: freed in between);
 * - contexts: one per device, current per thread; calls that need a context refuse to
 *   run without one (CUDA_ERROR_INVALID_CONTEXT) or with another device's
 *   (CUDA_ERROR_INVALID_HANDLE), as the real driver does;
 * - streams: FIFO queues, each drained by its own thread, every operation after a
 *   configurable random delay; events with record generations; cuStreamWaitEvent;
 *   the streams of a context share CUDA_DEVICE_MAX_CONNECTIONS hardware queues
 *   (hwqueue.c, default 8), in each of which a waiting operation holds back what was
 *   queued behind it;
 * - registered host memory (hostreg.c): cuMemHostRegister'ed ranges whose device
 *   address is their host address, for stream memory operations and device copies;
 * - pinned host memory: tracked, poisoned on free; a copy that runs on freed pinned
 *   memory counts as bad_access, and a copy queued on host memory that a pending
 *   operation of another stream still uses counts as a host race;
 * - the special stream handles, resolved on the calling thread as the driver does:
 *   NULL and CU_STREAM_LEGACY (0x1) are the legacy default stream of the current
 *   context, CU_STREAM_PER_THREAD (0x2) the calling thread's own default stream. The
 *   legacy stream synchronizes with blocking streams (flags 0: per-thread streams and
 *   fakecudaStreamCreate's) both ways, and not with CU_STREAM_NON_BLOCKING ones, so a
 *   consumer on the default stream that is not ordered after a non-blocking stream's
 *   copies really runs before them;
 * - stream capture (fakecudaBeginCapture): work queued on a capturing stream is
 *   recorded, not run, and an event recorded there is not a real record, as in a graph;
 *   capture modes (capture.c): a global-mode capture is invalidated by a potentially
 *   unsafe call (event query, synchronization, allocation) of another thread that is not
 *   in relaxed mode;
 * - primary contexts: reference counted. The CUDA runtime's own reference is modelled
 *   (fakecudaRuntimeInit, implied by the first fakecudaContext/StreamCreate/Malloc of a
 *   device, as torch's first CUDA call takes it); when the count drops to 0 the context
 *   is really reset: its streams, events, device memory and pinned memory die with it;
 * - strictness where the real driver is unforgiving (context.c's fault()): a destroyed
 *   or unknown event, a stream or event of a reset context, a call made with a reset
 *   context current abort the process with "fakecuda: FAULT: ..." instead of returning
 *   an error code; freed pinned memory is poisoned and mprotect'ed PROT_NONE, so any
 *   later host access or queued copy on it dies of SIGSEGV (after a FAULT line for a
 *   queued copy);
 * - torch's stream pool (fakecudaPoolStream): 32 non-blocking streams per device handed
 *   out round-robin to whoever asks, so two users can get the same stream;
 * - consumers: fakecudaCheckF32 compares memory with the expected value when it runs
 *   and counts stale_reads;
 * - allocation and free synchronize, as on a GPU (drain.c, always on): cuMemAlloc,
 *   cuMemFree, cuMemHostAlloc and cuMemFreeHost first wait until every stream of the
 *   current context has run what was queued on it before the call; so does the first
 *   launch of a kernel loaded lazily (the driver's default, CUDA_MODULE_LOADING=LAZY:
 *   a function is loaded at its first launch unless CUDA_MODULE_LOADING=EAGER or
 *   cuFuncLoad loaded it). Where that wait would never end (a stream blocked on a flag
 *   or an event nobody sets) it aborts after FAKECUDA_DRAIN_TIMEOUT_MS (default 20000)
 *   without progress, with "fakecuda: FAULT: cuMemFree waits for all work of the
 *   context ..., but stream 0x... has made no progress ...: it is blocked on
 *   cuStreamWaitValue32 on the flag at 0x... (it holds 1; the wait needs >= 2)";
 * - memory shared between processes (deadpeer.c): cuMemFree of exported memory that a
 *   live process still maps (opened, not yet closed) faults; a stream write (a
 *   cuStreamWriteValue32, a device copy's destination) into memory mapped from a
 *   process that has died faults (and is counted in dead_peer_writes), as the real
 *   write poisons the context; gonccl's flags live in host memory every rank maps
 *   (cuda/hostflags.go), so a survivor's queued posts never hit a dead peer's memory;
 *   an importer's stream access to memory its exporter freed while it was mapped
 *   (fakecudaFreeExported, as PyTorch's allocator frees a segment a peer maps) faults
 *   too; IPC mappings die with the primary context that opened them;
 * - who may touch what (module.c, ipc.c): a kernel or stream memory operation of one
 *   GPU that touches another GPU's memory without peer access, or cuMemMap'ed memory
 *   without cuMemSetAccess for its GPU, faults; copies between GPUs are free (unified
 *   addressing); stream memory operations take only device pointers (registered host
 *   memory only with CU_MEMHOSTREGISTER_DEVICEMAP);
 * - stream-ordered pool memory (pool.c): cuMemAllocAsync / cuMemFreeAsync, freed in
 *   stream order, addresses reused, not exportable through CUDA IPC;
 * - several GPUs (visible.c): CUDA_VISIBLE_DEVICES numbers the physical fake GPUs a
 *   process sees from 0, as the driver does, so with a per-rank setting every rank's
 *   device 0 may be a different GPU; bus ids (cuDeviceGetPCIBusId,
 *   cuDeviceGetByPCIBusId: 0000:1N:00.0 for physical GPU N), IPC handles and peer
 *   access are the physical GPU's;
 * - the strict counters (fakecudaGetStrictCounters, fakecuda_strict.h): device
 *   allocations and frees, exports, mappings opened and closed, drains, lazy loads
 *   and dead-peer writes, so tests can show that the hot path allocates nothing and
 *   that a decision was taken before anything was exported.
 *
 * Everything declared below is hidden: libfakecuda.so exports only the driver entry
 * points (cu*) and the hooks of fakecuda.h.
 */
#ifndef FAKECUDA_INTERNAL_H_
#define FAKECUDA_INTERNAL_H_

#include "fakecuda.h"

#include <pthread.h>
#include <stddef.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
};

#define STREAM_LEGACY ((void*)0x1)
#define STREAM_PER_THREAD ((void*)0x2)
#define STREAM_NON_BLOCKING 0x1

#define NDEV 8
#define POISON 0xDB

typedef struct fakeCtx {
  int dev;
  long refs;    /* primary context references (the runtime's included); 0: inactive */
  int runtime;  /* the CUDA runtime holds one of refs */
  unsigned gen; /* bumped by every reset: what was made before it is dead */
} fakeCtx;

typedef struct alloc {
  char* p;
  size_t n;
  int dev;      /* -1: pinned host memory */
  int live;
  int vmm;        /* mapped with cuMemMap (vmm.c): no context owns it */
  unsigned access; /* vmm: the ordinals cuMemSetAccess gave access (bit per ordinal) */
  int maker;       /* vmm, imported: the pid of the process that made the memory (cuMemCreate) */
  int lazy_peer;  /* opened with cuIpcOpenMemHandle: peer access enabled for the opener */
  void* pool;     /* stream-ordered pool memory (pool.c): its pool; NULL otherwise */
  int freeing;    /* pool memory whose cuMemFreeAsync is queued */
  size_t mapped;  /* pinned: the mmap'ed length (page multiple) */
  fakeCtx* ctx;   /* pinned: the context it was allocated in */
  unsigned long long id; /* CU_POINTER_ATTRIBUTE_BUFFER_ID: unique in the process */
  struct alloc* next;
} alloc;

typedef struct fakeEvent {
  unsigned magic; /* EVENT_MAGIC (event.c) */
  fakeCtx* ctx;
  unsigned gen; /* ctx->gen when created */
  unsigned long recorded, completed;
  int destroyed; /* kept (never freed), so later use is recognized */
  /* CU_EVENT_INTERPROCESS (ipcevent.c): recorded and completed mirrored in a shared
   * page, [0] recorded, [1] completed; imported: opened from another process's handle. */
  unsigned long* shm;
  int shm_fd;
  int imported;
} fakeEvent;

#define EVENT_MAGIC 0xE7E7E7E7u

enum { OP_COPY, OP_RECORD, OP_WAIT, OP_FILL, OP_ADD, OP_CHECK, OP_CALL };

/* An op runs only once the ops of other streams it depends on (the legacy default
 * stream's implicit synchronization) have run: stream s has run its op number ticket. */
typedef struct dep {
  struct fakeStream* s;
  unsigned long ticket;
} dep;

typedef struct op {
  int kind;
  char *dst, *src;   /* OP_COPY */
  size_t n;
  int dtoh;          /* OP_COPY: direction, for counters and host-side checks */
  char* host;        /* OP_COPY: the host side */
  int host_writes;
  fakeEvent* ev;     /* OP_RECORD / OP_WAIT */
  unsigned long gen;
  float value;       /* OP_FILL / OP_ADD */
  unsigned delay_us; /* extra delay of a fake kernel */
  dep* deps;         /* implicit synchronization with other streams */
  int ndeps;
  struct fakeStream* stream;
  /* OP_CALL: run calls call(o) with mu held (it may release it around a wait); the
   * op kinds of other files (ipc.c) keep their arguments in arg. */
  void (*call)(struct op*);
  unsigned long arg[2];
  unsigned long qticket; /* its place in its stream's hardware queue (hwqueue.c) */
  struct op* next;
} op;

typedef struct fakeStream {
  fakeCtx* ctx;
  op *head, *tail;
  int busy;
  int legacy;    /* the context's legacy default stream */
  int blocking;  /* synchronizes with the legacy stream (flags 0, per-thread streams) */
  int capturing; /* under stream capture: work is recorded into a graph, not run */
  int destroyed; /* cuStreamDestroy: what is queued still runs; any later use faults */
  unsigned long pushed, done; /* ops queued and ops run, counted from 1 */
  unsigned delay_us;          /* extra delay of every op of this stream */
  unsigned gen;               /* ctx->gen when created */
  pthread_t thread;
  int hwq; /* its hardware queue (hwqueue.c) */
  struct fakeStream* next;
} fakeStream;

#pragma GCC visibility push(hidden)

/* context.c: the shared state. mu guards everything below but the thread-local
 * t_current; cv is broadcast whenever an op is queued or has run. */
extern pthread_mutex_t mu;
extern pthread_cond_t cv;
extern fakeCtx g_ctx[NDEV];
extern __thread fakeCtx* t_current;
extern fakecudaCounters g_count;
extern int g_initialized;
extern fakeStream* g_streams; /* every stream (stream.c adds them) */

/* Context checks (context.c). mu need not be held. need_ctx faults if the current
 * context was reset. */
CUresult need_ctx(void);
CUresult stream_ctx_ok(fakeStream* s);
/* fault reports a use the real driver would crash on and aborts the process. */
void fault(const char* fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* runtime_init takes the CUDA runtime's reference on dev's primary context once. mu
 * held. */
void runtime_init(int dev);
/* ctx_alive: ctx has references and gen is its current generation. mu held. */
int ctx_alive(const fakeCtx* ctx, unsigned gen);

/* memory.c: find returns the allocation holding [p, p+n), live or freed, or NULL
 * (device memory if dev_kind, else pinned host memory). mu held. */
alloc* find(const void* p, size_t n, int dev_kind);
/* track enters [p, p+n) in the table as a live allocation of device dev (-1: pinned
 * host memory). mu held. */
alloc* track(char* p, size_t n, int dev);
/* kill_allocs frees what a reset context owned: device memory of its device and pinned
 * memory allocated in it. mu held. */
void kill_allocs(fakeCtx* ctx);

/* stream.c. mu held for all three. */
fakeStream* new_stream(fakeCtx* ctx, int blocking, int legacy);
/* resolve faults for a stream of a reset context. */
CUresult resolve(void* h, fakeStream** out);
/* forget_streams drops the default and pool streams of a reset context. */
void forget_streams(fakeCtx* ctx);
void push(fakeStream* s, op* o);

/* pool.c: whether stream-ordered pools are supported (FAKECUDA_NO_MEMPOOLS unset). */
int pools_supported(void);

/* hostreg.c: whether [p, p+n) is registered host memory with a device address
 * (cuMemHostRegister with CU_MEMHOSTREGISTER_DEVICEMAP). mu held. */
int hostreg_live(const void* p, size_t n);

/* hwqueue.c: the hardware queues the streams of a context share. mu held for all. */
int hwq_assign(fakeCtx* ctx);
void hwq_push(fakeStream* s, op* o);
int hwq_turn(const op* o); /* every operation before o in its queue has run */
void hwq_done(const op* o);

/* capture.c: capture modes. capture_begin/capture_end with mu held; capture_unsafe, the
 * first call of every potentially unsafe entry point, without. t_hook is set inside a
 * test hook whose calls must not invalidate a capture. */
void capture_begin(void* s, int mode);
int capture_end(void* s);
CUresult capture_unsafe(const char* fn);
extern __thread int t_hook;

/* calls.c: fake_called(fn) counts a call of entry point fn; every entry point calls it
 * first, through CALLED. */
void fake_called(const char* fn);
#define CALLED() fake_called(__func__)

/* ipcevent.c: inter-process events. ev_sync brings an inter-process event's counts up
 * to date: an exporter publishes its own, an importer reads the exporter's (no-op for
 * an ordinary event). ipc_event_create makes e inter-process (0, or a CUresult).
 * ipc_stream_wait queues on s a wait for an imported event (it polls the shared page).
 * mu held for all three. */
void ev_sync(fakeEvent* e);
CUresult ipc_event_create(fakeEvent* e);
void ipc_stream_wait(fakeStream* s, fakeEvent* e);

/* timeslice.c: contexts of one device take turns (FAKECUDA_TIMESLICE_US). ts_enter
 * takes dev's turn for an op about to run (it may release mu while it waits), ts_leave
 * gives it up once this process has no op running on dev, ts_hold takes it back for an
 * op that is running (a wait polling): a waiting stream keeps its context's turn until
 * its slice ends and another context wants the device. mu held for all three. */
void ts_enter(int dev);
void ts_leave(int dev);
void ts_hold(int dev);

#pragma GCC visibility pop

#endif
