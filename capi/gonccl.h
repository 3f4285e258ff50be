/*
 * gonccl.h: the public C ABI of libgonccl.so.
 *
 * NCCL-shaped: the same call names with a "gonccl" prefix, the same data-type and
 * reduction-op numbering, the same result codes. A C, C++, CuPy or JAX program links
 * against (or dlopens) libgonccl.so and includes this header; no torch is involved.
 *
 * Buffers. With stream == NULL every buffer is host memory and the call blocks until
 * the collective has finished on this rank (or failed). In-place calls (sendbuff ==
 * recvbuff, or for AllGather sendbuff == recvbuff + rank*sendcount) are supported.
 *
 * Device buffers. With a non-NULL stream (a cudaStream_t / CUstream; use
 * cudaStreamLegacy for the default stream, as NULL means host buffers) every buffer is
 * CUDA device memory of the stream's device. cudaStreamPerThread is refused
 * (goncclInvalidUsage): gonccl queues the copies from its own threads, where that
 * handle names another stream. So is a stream under CUDA graph capture: the staging
 * waits on the host, which a graph cannot capture. gonccl loads the CUDA driver with dlopen
 * (GONCCL_CUDA_LIBRARY, else libcuda.so.1); without it such calls fail with
 * goncclInvalidUsage ("stream given but CUDA is not available: ..."). When the
 * operation runs, in the communicator's issue order, gonccl enqueues device->host
 * copies of its inputs on `stream` into pinned host buffers and waits for them, runs
 * the host algorithm on those buffers, enqueues host->device copies of the result on
 * `stream` and records a completion event on `stream`. Hence the operation sees all
 * work queued on `stream` before it ran, and later work on `stream` sees the result.
 * Give gonccl a stream dedicated to it (like NCCL's communicator stream) and order
 * other streams with goncclRequestWaitStream or CUDA events. The pinned buffers are
 * reused only once the completion event has completed and are freed by
 * goncclCommDestroy. A blocking call with a stream returns once the host part is done
 * and the host->device copies are enqueued (not finished: synchronise `stream` or wait
 * on it before reading the result on the host). Point-to-point is staged too, but it
 * does not run in the communicator's issue order: a send copies its data device->host
 * on `stream` when it is issued (the call waits for that copy, which follows the work
 * queued on `stream` so far), a receive copies host->device on `stream` once the data
 * has arrived and completes after that copy is enqueued; order it with other
 * operations by waiting for it (goncclRequestWaitStream). A pointer CUDA does
 * not know, or memory of another device than the stream's, gives goncclInvalidArgument, a failed CUDA call goncclUnhandledCudaError;
 * messages name the CUDA error (e.g. "cuda: cuMemcpyDtoHAsync: CUDA_ERROR_INVALID_VALUE").
 *
 * Asynchrony. Each collective also has an ...Async form that enqueues the operation on
 * the communicator and returns a goncclRequest_t at once. Requests complete in issue
 * order. Wait with goncclRequestWait (blocking, with a timeout), poll with
 * goncclRequestTest, or register a completion callback with goncclRequestOnComplete,
 * which is how the PyTorch backend completes its futures without polling.
 * Every request must be released with goncclRequestFree.
 *
 * Errors. Every call returns a goncclResult_t. goncclGetLastError(comm) returns the
 * message of the last error seen on that communicator (rank, peer, op and sequence
 * number included); goncclRequestErrorString(req) returns a request's own message.
 */
#ifndef GONCCL_H_
#define GONCCL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GONCCL_MAJOR 0
#define GONCCL_MINOR 1
#define GONCCL_PATCH 0
/* Encoded like NCCL_VERSION_CODE: major*10000 + minor*100 + patch. */
#define GONCCL_VERSION_CODE (GONCCL_MAJOR * 10000 + GONCCL_MINOR * 100 + GONCCL_PATCH)

#define GONCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[GONCCL_UNIQUE_ID_BYTES];
} goncclUniqueId;

typedef struct goncclComm* goncclComm_t;
typedef struct goncclRequest* goncclRequest_t;
/* A one-sided window (see goncclWinCreate). */
typedef struct goncclWindow* goncclWindow_t;
/* Keeps a window's memory mapped (see goncclWinMemory). */
typedef unsigned long long goncclWinHold_t;
/* How this rank reaches a peer's window: UNIFIED, mapped in this process (the peer is
 * on this host: put is a copy into its memory, which goncclWinMemory hands out);
 * SEPARATE, through messages only (another host). The values are torch's. */
typedef enum { goncclWinUnified = 0, goncclWinSeparate = 1 } goncclWinAccess_t;
/* A cudaStream_t where CUDA is used; NULL for host buffers. */
typedef void* goncclStream_t;

typedef enum {
  goncclSuccess = 0,
  goncclUnhandledCudaError = 1,
  goncclSystemError = 2,
  goncclInternalError = 3,
  goncclInvalidArgument = 4,
  goncclInvalidUsage = 5,
  goncclRemoteError = 6,
  goncclInProgress = 7,
  /* gonccl additions, numbered far from NCCL's so they never collide. */
  goncclTimeout = 100,
  goncclMismatch = 101,
  goncclAborted = 102,
  goncclNotSupported = 103,
  goncclNumResults = 104
} goncclResult_t;

typedef enum {
  goncclInt8 = 0,
  goncclChar = 0,
  goncclUint8 = 1,
  goncclInt32 = 2,
  goncclInt = 2,
  goncclUint32 = 3,
  goncclInt64 = 4,
  goncclUint64 = 5,
  goncclFloat16 = 6,
  goncclHalf = 6,
  goncclFloat32 = 7,
  goncclFloat = 7,
  goncclFloat64 = 8,
  goncclDouble = 8,
  goncclBfloat16 = 9,
  goncclFloat8e4m3 = 10, /* no reductions: data movement only */
  goncclFloat8e5m2 = 11, /* no reductions: data movement only */
  /* gonccl additions, numbered far from NCCL's so they never collide. */
  goncclInt16 = 64,
  goncclUint16 = 65,
  goncclBool = 66,       /* one byte, 0 or 1; reduces with max/min/band/bor/bxor/sum(=or)/prod(=and) */
  goncclComplex64 = 67,  /* two float32; reduces with sum, prod, avg */
  goncclComplex128 = 68  /* two float64; reduces with sum, prod, avg */
} goncclDataType_t;

typedef enum {
  goncclSum = 0,
  goncclProd = 1,
  goncclMax = 2,
  goncclMin = 3,
  goncclAvg = 4,
  /* gonccl additions: bitwise ops, for integer and bool types only. */
  goncclBand = 64,
  goncclBor = 65,
  goncclBxor = 66
} goncclRedOp_t;

/* goncclRecv/goncclRecvAsync peer that matches a message from any rank; the sender is
 * then reported by goncclRequestSource. */
#define GONCCL_ANY_SOURCE (-1)

/* Called once when a request finishes; result is goncclSuccess or the error code.
 * It runs on a library thread: keep it short and never call back into gonccl
 * from it except goncclRequestErrorString on the same request. */
typedef void (*goncclCallback_t)(void* arg, goncclResult_t result);

/* gonccl extension: per-communicator settings for goncclCommInitRankConfig. Zero a
 * goncclConfig_t, set size to sizeof(goncclConfig_t) and the fields you want; a
 * zero/NULL field keeps the environment's setting. Every rank must pass the same
 * algo and chunkBytes. */
typedef struct {
  size_t size;        /* sizeof(goncclConfig_t): the fields this caller knows */
  int64_t timeoutMs;  /* bounds init and every operation; <= 0: GONCCL_TIMEOUT_MS */
  const char* algo;   /* GONCCL_ALGO's syntax (allreduce:ring;broadcast:chain, ^direct) */
  int64_t chunkBytes; /* pipelined chunk of ring/chain algorithms, 4096..1 GiB */
  uint32_t epoch;     /* communicator generation (see goncclCommInitRankEpoch); 0: first */
} goncclConfig_t;

/* gonccl extension: the kinds of operation goncclCommEstimate knows. */
typedef enum {
  goncclOpAllReduce = 1,
  goncclOpBroadcast = 2,
  goncclOpAllGather = 3, /* bytes: one rank's block */
  goncclOpBarrier = 4,
  goncclOpReduce = 5,
  goncclOpReduceScatter = 6, /* bytes: one rank's block (the output) */
  goncclOpGather = 7,        /* bytes: one rank's block */
  goncclOpScatter = 8,       /* bytes: one rank's block */
  goncclOpAlltoAll = 9,      /* bytes: the block for one peer */
  goncclOpSendRecv = 64      /* one message from one rank to another */
} goncclOpKind_t;

/* gonccl extension: what a communicator holds, in bytes, by kind
 * (goncclCommMemoryStats). */
typedef struct {
  int64_t scratchBytes;       /* host scratch for reductions */
  int64_t workBytes;          /* host work memory, grown on demand */
  int64_t shmRingBytes;       /* shared-memory send rings of this rank's links */
  int64_t pinnedBytes;        /* pinned staging pool of the CUDA path */
  int64_t deviceScratchBytes; /* device scratch of the device path (this rank's) */
} goncclMemoryStats_t;

#ifndef GONCCL_NO_PROTOTYPES

goncclResult_t goncclGetVersion(int* version);
goncclResult_t goncclGetUniqueId(goncclUniqueId* uniqueId);
/* gonccl extension, for leak checks: the process's live goroutines, the live Go heap
 * (bytes, after a garbage collection) and the number of live communicators. Any pointer
 * may be NULL. */
goncclResult_t goncclDebugStats(int64_t* goroutines, int64_t* goHeapBytes, int64_t* comms);
/* gonccl extension: the per-hop timing GONCCL_DEBUG_HOPS=1 collects in this process
 * (see core/hops.go), as lines "hop name\tcount\ttotal ns\n" in buf (NUL-terminated,
 * cut at len). *needed (if not NULL) gets the bytes the whole text needs, NUL included.
 * reset != 0 zeroes the sums after reading them. */
goncclResult_t goncclDebugHops(char* buf, size_t len, int reset, size_t* needed);

/* Creates this rank's communicator; blocks until all nranks ranks have joined or the
 * init timeout (GONCCL_TIMEOUT_MS, or goncclCommInitRankTimeout's) has passed. */
goncclResult_t goncclCommInitRank(goncclComm_t* comm, int nranks, goncclUniqueId commId,
                                  int rank);
/* Same, with the timeout (milliseconds) that bounds init and every later operation.
 * timeoutMs <= 0 means the default (GONCCL_TIMEOUT_MS, else 30 minutes). */
goncclResult_t goncclCommInitRankTimeout(goncclComm_t* comm, int nranks,
                                         goncclUniqueId commId, int rank,
                                         int64_t timeoutMs);
/* gonccl extension: the same with per-communicator settings (config may be NULL). */
goncclResult_t goncclCommInitRankConfig(goncclComm_t* comm, int nranks,
                                        goncclUniqueId commId, int rank,
                                        const goncclConfig_t* config);
/* gonccl extension: same as goncclCommInitRankTimeout, for communicator generation
 * epoch. Every rank passes the same epoch; frames and connections of another
 * generation are refused (older frames are dropped and logged). A communicator that
 * replaces another (after a rank was lost) takes the old one's epoch + 1. */
goncclResult_t goncclCommInitRankEpoch(goncclComm_t* comm, int nranks,
                                       goncclUniqueId commId, int rank,
                                       int64_t timeoutMs, uint32_t epoch);
/* gonccl extension: comm's generation, and how many frames of older generations it
 * has dropped. Either pointer may be NULL. */
goncclResult_t goncclCommEpoch(const goncclComm_t comm, uint32_t* epoch,
                               uint64_t* staleFrames);
/* gonccl extension: *us gets the estimated time, in microseconds, of one operation of
 * kind on bytes over comm, from the issue to the completion, as the cost model that
 * chooses its algorithm (GONCCL_ALGO) sees it. Nothing is run or sent. */
goncclResult_t goncclCommEstimate(const goncclComm_t comm, goncclOpKind_t kind,
                                  size_t bytes, double* us);
/* gonccl extension: stops comm from taking operations (they fail with
 * goncclInvalidArgument, saying it is suspended) and frees its memory: host scratch,
 * shared-memory send rings (connections stay), the pinned staging pool and the device
 * scratch. Waits up to the communicator's timeout for earlier operations to finish.
 * Every rank of a communicator that uses the device path must suspend. */
goncclResult_t goncclCommSuspend(goncclComm_t comm);
/* gonccl extension: takes operations again after goncclCommSuspend; the memory comes
 * back as operations need it. */
goncclResult_t goncclCommResume(goncclComm_t comm);
/* gonccl extension: what comm holds now, by kind. */
goncclResult_t goncclCommMemoryStats(const goncclComm_t comm, goncclMemoryStats_t* stats);
/* gonccl extension: connects comm to every peer it has not connected to yet (init
 * connects only the peers its first algorithms need; the others on first use). */
goncclResult_t goncclCommConnectAll(goncclComm_t comm);
/* gonccl extension: *count gets how many peers comm has a connection to. */
goncclResult_t goncclCommConnectedPeers(const goncclComm_t comm, int* count);
/* gonccl extension, in the spirit of ncclMemAlloc: *ptr gets size bytes (zeroed) of
 * shared memory (a memfd mapped MAP_SHARED) that gonccl allocated; free it with
 * goncclMemFree. A collective whose buffers every rank of one host took from here runs
 * zero-copy: the ranks read and write each other's buffers in place (GONCCL_ZEROCOPY). */
goncclResult_t goncclMemAlloc(void** ptr, size_t size);
/* gonccl extension: frees memory from goncclMemAlloc. */
goncclResult_t goncclMemFree(void* ptr);
/* Waits for pending operations, then frees the communicator. Every request of the
 * communicator has completed (and its callback has run) when it returns; requests
 * must still be freed with goncclRequestFree, which stays valid after destruction. */
goncclResult_t goncclCommDestroy(goncclComm_t comm);
/* Fails pending operations at once, closes every connection, frees the communicator.
 * As with goncclCommDestroy, every request has completed when it returns. */
goncclResult_t goncclCommAbort(goncclComm_t comm);
/* Sets the timeout (milliseconds) of the operations enqueued on comm after the call;
 * operations already enqueued keep theirs. A collective's timeout runs from when the
 * communicator starts it (after the operations before it), a send's or receive's from
 * its call. A timeoutMs of 0 or less is a deadline already passed, as a caller that
 * passes the time left before its own deadline may find: each operation enqueued with
 * it fails with goncclTimeout at its first wait, naming the peer (one that need not
 * wait, such as a receive whose message has arrived, still completes). Round a time
 * left up to whole milliseconds, so that a remainder below 1 ms is not taken for 0.
 * Thread-safe; the torch backend uses it for set_timeout and per-call timeouts. */
goncclResult_t goncclCommSetTimeout(goncclComm_t comm, int64_t timeoutMs);
goncclResult_t goncclCommCount(const goncclComm_t comm, int* count);
/* Sets *asyncError to the result code of the error that broke comm, or goncclSuccess,
 * as ncclCommGetAsyncError does; goncclGetLastError(comm) then has its message. This is
 * how a failure after a stream-ordered call returned is seen (a lost peer, a timeout,
 * ranks that disagree on the device path), besides the next call failing with it. */
goncclResult_t goncclCommGetAsyncError(goncclComm_t comm, goncclResult_t* asyncError);
goncclResult_t goncclCommUserRank(const goncclComm_t comm, int* rank);

/* The name of a result code. The string is static: valid for the life of the process,
 * from any thread. */
const char* goncclGetErrorString(goncclResult_t result);
/* The message of the last failure on comm, or, with comm == NULL (or a communicator
 * that failed to initialise or was destroyed), of the last failure in this process, by
 * any thread (the executor failing an operation included); "" if none. Never NULL.
 *
 * Lifetime: the string is a copy in storage of the calling thread's own. It stays
 * valid and unchanged until the same thread calls goncclGetLastError again (the next
 * call reuses the storage) or exits; failures and calls on other threads, and
 * destroying comm, do not touch it. Copy it to keep it longer. (NCCL's
 * ncclGetLastError returns one process-wide buffer that any thread's next error
 * overwrites; gonccl's promise is stronger.) Safe to call from any thread, any number
 * of threads at once. */
const char* goncclGetLastError(goncclComm_t comm);

/* Writes comm's flight recorder (its last GONCCL_TRACE_BUFFER_SIZE collectives: what,
 * algorithm, state, times, error) as JSON to path, or, if path is a directory, to
 * gonccl_trace_<comm>_rank<r>_pid<pid>.json inside it. `python -m gonccl.trace DIR`
 * reads every rank's file and names the rank that is behind or stuck. */
goncclResult_t goncclCommDumpTrace(goncclComm_t comm, const char* path);
/* gonccl extension: tells comm's peers that this rank will not make its next
 * collective call on comm, of kind (goncclOpAllReduce ... goncclOpAlltoAll), because a
 * check of its arguments failed before the call; reason says which (a binding passes
 * the message of the error it raises). Without it, peers that made the call wait for
 * this rank until their timeout, or see only "lost rank" once its process exits; with
 * it, their operation of that number fails at once (goncclMismatch) with
 * "rank R refused <kind> #N: <reason>". The call uses up the collective's sequence
 * number, so ranks that all refuse the same call stay in step and comm stays usable.
 * It waits until the word is written to every peer's connection, at most 2 s, and is
 * best effort: a peer this rank has no connection to is not told. Fails only for a
 * destroyed comm, a NULL reason or a kind that is no collective. */
goncclResult_t goncclCommRefuse(goncclComm_t comm, goncclOpKind_t kind, const char* reason);

/* Blocking collectives (stream == NULL: host buffers). */
goncclResult_t goncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               goncclDataType_t datatype, goncclRedOp_t op,
                               goncclComm_t comm, goncclStream_t stream);
goncclResult_t goncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               goncclDataType_t datatype, int root, goncclComm_t comm,
                               goncclStream_t stream);
goncclResult_t goncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               goncclDataType_t datatype, goncclComm_t comm,
                               goncclStream_t stream);
goncclResult_t goncclBarrier(goncclComm_t comm, goncclStream_t stream);

/* Reduces count elements from every rank into recvbuff on root (recvbuff is not
 * touched on other ranks). */
goncclResult_t goncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                            goncclDataType_t datatype, goncclRedOp_t op, int root,
                            goncclComm_t comm, goncclStream_t stream);
/* Reduces nranks*recvcount elements from every rank; rank i receives block i
 * (recvcount elements) of the result. In place: recvbuff == sendbuff + rank*recvcount. */
goncclResult_t goncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   goncclDataType_t datatype, goncclRedOp_t op,
                                   goncclComm_t comm, goncclStream_t stream);
/* Every rank sends count elements to root, which stores rank i's at recvbuff + i*count. */
goncclResult_t goncclGather(const void* sendbuff, void* recvbuff, size_t count,
                            goncclDataType_t datatype, int root, goncclComm_t comm,
                            goncclStream_t stream);
/* root sends block i (count elements at sendbuff + i*count) to rank i's recvbuff. */
goncclResult_t goncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                             goncclDataType_t datatype, int root, goncclComm_t comm,
                             goncclStream_t stream);
/* Every rank sends block j (count elements at sendbuff + j*count) to rank j, which
 * stores it at recvbuff + i*count (i the sender). */
goncclResult_t goncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                              goncclDataType_t datatype, goncclComm_t comm,
                              goncclStream_t stream);
/* Uneven all-to-all: rank i sends sendcounts[j] elements at sendbuff + sdispls[j] to
 * rank j, and receives recvcounts[j] elements from rank j at recvbuff + rdispls[j]
 * (counts and displacements in elements; each array has nranks entries). The count a
 * rank sends must equal the count its peer expects, or both get goncclMismatch. */
goncclResult_t goncclAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                               const size_t sdispls[], void* recvbuff,
                               const size_t recvcounts[], const size_t rdispls[],
                               goncclDataType_t datatype, goncclComm_t comm,
                               goncclStream_t stream);

/* Point to point. Unlike collectives, these do not wait for earlier operations on the
 * communicator: sends and receives progress independently, in any order, and never
 * deadlock where NCCL or Gloo do not. Messages between two ranks with the same tag
 * arrive in the order they were sent. The blocking forms use tag 0. On the device path
 * (GONCCL_DEVICE_PATH=1, device buffers) they are enqueued on streams as NCCL's are and
 * match per pair of ranks in the order enqueued, without tags or GONCCL_ANY_SOURCE. */
goncclResult_t goncclSend(const void* sendbuff, size_t count, goncclDataType_t datatype,
                          int peer, goncclComm_t comm, goncclStream_t stream);
goncclResult_t goncclRecv(void* recvbuff, size_t count, goncclDataType_t datatype, int peer,
                          goncclComm_t comm, goncclStream_t stream);

/* Group calls. Between goncclGroupStart and goncclGroupEnd (which nest, per thread),
 * operations may be issued in any order, as with NCCL; gonccl starts each at once
 * (point-to-point progresses independently, collectives queue in issue order), so a
 * group never deadlocks on the order of its calls. On the device path
 * (GONCCL_DEVICE_PATH=1) the blocking goncclSend/goncclRecv on device buffers are held
 * until the outermost goncclGroupEnd, which enqueues them together on their streams. */
goncclResult_t goncclGroupStart(void);
goncclResult_t goncclGroupEnd(void);

/* Asynchronous forms: enqueue and return a request at once. The buffers must stay
 * valid until the request has completed. A communicator queues at most
 * GONCCL_QUEUE_DEPTH collectives (default 1024); a collective issued, async or not, while
 * its queue is full blocks the calling thread until the executor makes room, without
 * holding any lock. It returns goncclTimeout if the queue stays full for the operation
 * timeout, and an error at once if the communicator is destroyed or aborted
 * meanwhile. */
goncclResult_t goncclAllReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                    goncclDataType_t datatype, goncclRedOp_t op,
                                    goncclComm_t comm, goncclStream_t stream,
                                    goncclRequest_t* request);
goncclResult_t goncclBroadcastAsync(const void* sendbuff, void* recvbuff, size_t count,
                                    goncclDataType_t datatype, int root, goncclComm_t comm,
                                    goncclStream_t stream, goncclRequest_t* request);
goncclResult_t goncclAllGatherAsync(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    goncclDataType_t datatype, goncclComm_t comm,
                                    goncclStream_t stream, goncclRequest_t* request);
goncclResult_t goncclBarrierAsync(goncclComm_t comm, goncclStream_t stream,
                                  goncclRequest_t* request);
goncclResult_t goncclReduceAsync(const void* sendbuff, void* recvbuff, size_t count,
                                 goncclDataType_t datatype, goncclRedOp_t op, int root,
                                 goncclComm_t comm, goncclStream_t stream,
                                 goncclRequest_t* request);
goncclResult_t goncclReduceScatterAsync(const void* sendbuff, void* recvbuff,
                                        size_t recvcount, goncclDataType_t datatype,
                                        goncclRedOp_t op, goncclComm_t comm,
                                        goncclStream_t stream, goncclRequest_t* request);
goncclResult_t goncclGatherAsync(const void* sendbuff, void* recvbuff, size_t count,
                                 goncclDataType_t datatype, int root, goncclComm_t comm,
                                 goncclStream_t stream, goncclRequest_t* request);
goncclResult_t goncclScatterAsync(const void* sendbuff, void* recvbuff, size_t count,
                                  goncclDataType_t datatype, int root, goncclComm_t comm,
                                  goncclStream_t stream, goncclRequest_t* request);
goncclResult_t goncclAlltoAllAsync(const void* sendbuff, void* recvbuff, size_t count,
                                   goncclDataType_t datatype, goncclComm_t comm,
                                   goncclStream_t stream, goncclRequest_t* request);
/* The count and displacement arrays are copied before this returns. */
goncclResult_t goncclAlltoAllvAsync(const void* sendbuff, const size_t sendcounts[],
                                    const size_t sdispls[], void* recvbuff,
                                    const size_t recvcounts[], const size_t rdispls[],
                                    goncclDataType_t datatype, goncclComm_t comm,
                                    goncclStream_t stream, goncclRequest_t* request);
/* Point to point with a tag (c10d's send/recv tag). The send request completes when the
 * data has been handed to the transport (the buffer may then be reused); the receive
 * request when the data is in recvbuff. A receive whose count differs from the
 * matching send's fails with goncclMismatch naming both sizes. */
goncclResult_t goncclSendAsync(const void* sendbuff, size_t count, goncclDataType_t datatype,
                               int peer, int tag, goncclComm_t comm, goncclStream_t stream,
                               goncclRequest_t* request);
/* peer may be GONCCL_ANY_SOURCE. */
goncclResult_t goncclRecvAsync(void* recvbuff, size_t count, goncclDataType_t datatype,
                               int peer, int tag, goncclComm_t comm, goncclStream_t stream,
                               goncclRequest_t* request);

/* Sets *done to 1 when the request has finished; returns its result once done. */
goncclResult_t goncclRequestTest(goncclRequest_t request, int* done);
/* Blocks until the request finishes or timeoutMs passes (timeoutMs < 0: no extra limit;
 * the operation's own deadline still applies). Returns goncclTimeout if the wait timed
 * out while the operation is still running, else the request's result. */
goncclResult_t goncclRequestWait(goncclRequest_t request, int64_t timeoutMs);
/* Registers fn to run once when the request finishes (at once, on the calling thread,
 * if it already has). At most one callback per request. */
goncclResult_t goncclRequestOnComplete(goncclRequest_t request, goncclCallback_t fn,
                                       void* arg);
/* The request's error message, or "" if it succeeded or has not finished. Never NULL.
 * The string is set once, when the request fails, and never changes: it stays valid,
 * from any thread, until goncclRequestFree(request) (which must not race with a
 * reader of it). */
const char* goncclRequestErrorString(goncclRequest_t request);
/* The rank a finished receive came from (for GONCCL_ANY_SOURCE); for other requests
 * the peer they were issued with, or -1 for collectives. */
goncclResult_t goncclRequestSource(goncclRequest_t request, int* peer);
/* For a request of an operation on device buffers: blocks until its host part is done
 * (returning the operation's error if it failed), then makes stream `waiter` wait
 * (cuStreamWaitEvent) for the operation's completion event, so work queued on `waiter`
 * afterwards sees the result. waiter may be any stream of the operation's context,
 * cudaStreamLegacy and cudaStreamPerThread included (resolved on the calling thread).
 * waiter == NULL, or a request on host buffers: only the host wait. */
goncclResult_t goncclRequestWaitStream(goncclRequest_t request, goncclStream_t waiter);
/* For a request of a collective on device buffers whose caller queues follow-up work on
 * the operation's stream once it has completed (copies out of the buffers, as the
 * PyTorch backend does), which the communicator's later operations must see: the next
 * collective on device buffers queues nothing on its stream until
 * goncclRequestReleaseStream(request) (or goncclRequestFree, or the next operation's
 * deadline, which then fails it). Call it before issuing the next operation. No-op
 * for host buffers and point-to-point. */
goncclResult_t goncclRequestHoldStream(goncclRequest_t request);
goncclResult_t goncclRequestReleaseStream(goncclRequest_t request);
/* goncclSuccess if device-buffer operations may be issued on stream from this thread;
 * goncclInvalidUsage naming the reason if it is cudaStreamPerThread or under CUDA graph
 * capture (stream must not be NULL: pass cudaStreamLegacy for the default stream). */
goncclResult_t goncclStreamCheck(goncclStream_t stream);
/* goncclStreamCheck for a stream of CUDA device `device`: cudaStreamLegacy then names
 * that device's default stream even on a thread with no CUDA context current (one that
 * never made a CUDA call), where goncclStreamCheck fails with CUDA_ERROR_INVALID_CONTEXT. */
goncclResult_t goncclStreamCheckDevice(goncclStream_t stream, int device);
/* gonccl extension: a CUDA stream of gonccl's own on device (non-blocking, created in
 * the device's primary context, which gonccl then keeps for the life of the process),
 * in use by no one else until goncclStreamRelease gives it back; it is handed out again
 * later, never destroyed. For a caller that needs a stream no other code queues on (the
 * PyTorch backend's stream per device, rather than one of torch's round-robin pool
 * streams that another process group may hold too). goncclInvalidUsage if CUDA is not
 * available, goncclUnhandledCudaError naming the CUDA error if it cannot be created. */
goncclResult_t goncclStreamAcquire(int device, goncclStream_t* stream);
goncclResult_t goncclStreamRelease(goncclStream_t stream);
/* Releases the request. A request still running keeps running; its callback still runs. */
goncclResult_t goncclRequestFree(goncclRequest_t request);

/* One-sided windows, in the spirit of NCCL 2.29's (ncclCommWindowRegister,
 * ncclPutSignal, ncclSignal, ncclWaitSignal), on host memory. Every rank exposes a
 * window of its own; other ranks write into it with goncclPut and tell it they have
 * with goncclSignal; it waits with goncclWaitSignal. The window memory is gonccl's
 * shared memory: peers on the same host map it and put is a plain copy into it;
 * peers on other hosts send puts and signals over their point-to-point connection.
 * A signal always arrives after the puts its sender issued to that rank before it.
 *
 * Device memory: goncclWinRegister given a CUDA device pointer (memory from
 * cudaMalloc/cuMemAlloc) makes a window over that memory itself, for ranks on one
 * host (all ranks register device memory, or all host memory). Each rank maps the
 * others' memory once, through CUDA IPC; a put is a device copy queued on a stream
 * (goncclPutOnStream; goncclPut and goncclPutAsync use the legacy default stream);
 * a signal goes out once the host has seen the puts before it complete, and
 * goncclWaitSignal waits on the host, so no stream ever waits on the GPU for another
 * process. goncclWinMemory returns device addresses, valid until
 * goncclWinDeregister, which unmaps every peer's memory before its barrier: after
 * it returns the memory may be freed.
 *
 * goncclWinCreate, goncclWinRegister and goncclWinDeregister are collective: every
 * rank calls them in the same order, also relative to collectives. */
goncclResult_t goncclWinCreate(goncclComm_t comm, goncclWindow_t* win);
/* Gives the window count elements of datatype on this rank (ranks may differ in both),
 * initialised from init (count elements in host memory) or zeros if init is NULL.
 * The memory is gonccl's, not init's: goncclWinMemory(win, own rank) returns it. */
goncclResult_t goncclWinRegister(goncclWindow_t win, const void* init, size_t count,
                                 goncclDataType_t datatype);
/* Releases the registered memory once every rank has called it (memory held with
 * goncclWinMemory stays mapped until its hold is released). */
goncclResult_t goncclWinDeregister(goncclWindow_t win);
/* Frees the window handle and this rank's window memory at once (not collective: puts
 * and signals that peers still send it are dropped with a warning). */
goncclResult_t goncclWinFree(goncclWindow_t win);
/* How this rank reaches rank peer's window. */
goncclResult_t goncclWinGetAttr(goncclWindow_t win, int peer, goncclWinAccess_t* access);
/* The size and data type rank registered. */
goncclResult_t goncclWinGetInfo(goncclWindow_t win, int rank, size_t* count,
                                goncclDataType_t* datatype);
/* The address of rank's window memory in this process and its size in bytes: this
 * rank's own, or a same-host peer's (writes there land in the peer's window: pair them
 * with goncclSignal). goncclNotSupported for a rank on another host. With hold NULL the
 * address is valid until goncclWinDeregister; else until goncclWinHoldRelease(*hold). */
goncclResult_t goncclWinMemory(goncclWindow_t win, int rank, void** ptr, size_t* bytes,
                               goncclWinHold_t* hold);
goncclResult_t goncclWinHoldRelease(goncclWinHold_t hold);
/* Copies count elements of datatype from src (host memory) into rank peer's window at
 * element offset peerOffset; datatype must be the one peer registered. The blocking
 * form returns, and the request completes, when src may be reused; the data is in
 * peer's window by the time peer sees this rank's next signal. */
goncclResult_t goncclPut(const void* src, size_t count, goncclDataType_t datatype, int peer,
                         size_t peerOffset, goncclWindow_t win);
goncclResult_t goncclPutAsync(const void* src, size_t count, goncclDataType_t datatype,
                              int peer, size_t peerOffset, goncclWindow_t win,
                              goncclRequest_t* request);
/* goncclPut from device memory into a window registered on device memory, queued on
 * stream (NULL: the legacy default stream); it returns once queued, and src may be
 * reused by work queued after it on stream. Refused for a window of host memory. */
goncclResult_t goncclPutOnStream(const void* src, size_t count, goncclDataType_t datatype,
                                 int peer, size_t peerOffset, goncclWindow_t win,
                                 goncclStream_t stream);
/* Adds one to peer's count of signals from this rank. */
goncclResult_t goncclSignal(int peer, goncclWindow_t win);
goncclResult_t goncclSignalAsync(int peer, goncclWindow_t win, goncclRequest_t* request);
/* Waits for (consumes) the next signal from peer; signals that came earlier count. Fails
 * with goncclTimeout naming peer if none comes within the communicator's timeout, or
 * with the failure of peer or the communicator. */
goncclResult_t goncclWaitSignal(int peer, goncclWindow_t win);
goncclResult_t goncclWaitSignalAsync(int peer, goncclWindow_t win, goncclRequest_t* request);

#endif /* GONCCL_NO_PROTOTYPES */

#ifdef __cplusplus
}
#endif

#endif /* GONCCL_H_ */
