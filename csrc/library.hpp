// library.hpp: loads libgonccl.so at run time and holds its entry points.
//
// The extension never links against libgonccl.so: the Go library carries
// undefined nvml* symbols (RTLD_NOW would fail), and a child forked after the
// Go runtime started cannot call into Go (it would hang there; checkNotForked
// refuses with an error instead), so starting it at `import gonccl` would take
// gonccl from every forked child. So the library is dlopen'ed with RTLD_LAZY on
// first use and every gonccl* function is called through the table below.
#pragma once

#include <chrono>
#include <string>

#include "gonccl.h"

namespace gonccl {

// The entry points of libgonccl.so that csrc calls, as X(field, symbol).
// Every one is required: the library ships inside the package, built from the
// same sources as the extension (setup.py checks a prebuilt GONCCL_LIBRARY
// exports all of gonccl.h), so a missing symbol is a load error naming it.
#define GONCCL_LIBRARY_FUNCTIONS(X)                   \
  X(getVersion, goncclGetVersion)                     \
  X(getUniqueId, goncclGetUniqueId)                   \
  X(commInitRankTimeout, goncclCommInitRankTimeout)   \
  X(commInitRankConfig, goncclCommInitRankConfig)     \
  X(commInitRankEpoch, goncclCommInitRankEpoch)       \
  X(commEpoch, goncclCommEpoch)                       \
  X(commRefuse, goncclCommRefuse)                     \
  X(commSetTimeout, goncclCommSetTimeout)             \
  X(commDestroy, goncclCommDestroy)                   \
  X(commAbort, goncclCommAbort)                       \
  X(getErrorString, goncclGetErrorString)             \
  X(getLastError, goncclGetLastError)                 \
  X(debugHops, goncclDebugHops)                       \
  X(allReduceAsync, goncclAllReduceAsync)             \
  X(broadcastAsync, goncclBroadcastAsync)             \
  X(allGatherAsync, goncclAllGatherAsync)             \
  X(barrierAsync, goncclBarrierAsync)                 \
  X(reduceAsync, goncclReduceAsync)                   \
  X(reduceScatterAsync, goncclReduceScatterAsync)     \
  X(gatherAsync, goncclGatherAsync)                   \
  X(scatterAsync, goncclScatterAsync)                 \
  X(alltoAllAsync, goncclAlltoAllAsync)               \
  X(alltoAllvAsync, goncclAlltoAllvAsync)             \
  X(sendAsync, goncclSendAsync)                       \
  X(recvAsync, goncclRecvAsync)                       \
  X(requestTest, goncclRequestTest)                   \
  X(requestWait, goncclRequestWait)                   \
  X(requestOnComplete, goncclRequestOnComplete)       \
  X(requestErrorString, goncclRequestErrorString)     \
  X(requestSource, goncclRequestSource)               \
  X(requestHoldStream, goncclRequestHoldStream)       \
  X(requestReleaseStream, goncclRequestReleaseStream) \
  X(requestFree, goncclRequestFree)                   \
  X(streamCheck, goncclStreamCheck)                   \
  X(streamCheckDevice, goncclStreamCheckDevice)       \
  X(streamAcquire, goncclStreamAcquire)               \
  X(streamRelease, goncclStreamRelease)               \
  X(winCreate, goncclWinCreate)                       \
  X(winRegister, goncclWinRegister)                   \
  X(winDeregister, goncclWinDeregister)               \
  X(winFree, goncclWinFree)                           \
  X(winGetAttr, goncclWinGetAttr)                     \
  X(winGetInfo, goncclWinGetInfo)                     \
  X(winMemory, goncclWinMemory)                       \
  X(winHoldRelease, goncclWinHoldRelease)             \
  X(putAsync, goncclPutAsync)                         \
  X(putOnStream, goncclPutOnStream)                   \
  X(signalAsync, goncclSignalAsync)                   \
  X(waitSignalAsync, goncclWaitSignalAsync)           \
  X(commEstimate, goncclCommEstimate)                 \
  X(commSuspend, goncclCommSuspend)                   \
  X(commResume, goncclCommResume)                     \
  X(commMemoryStats, goncclCommMemoryStats)           \
  X(commConnectAll, goncclCommConnectAll)             \
  X(commConnectedPeers, goncclCommConnectedPeers)     \
  X(memAlloc, goncclMemAlloc)                         \
  X(memFree, goncclMemFree)

// The entry points, filled by dlsym; their types come from gonccl.h.
struct Library {
#define GONCCL_LIBRARY_FIELD(field, symbol) decltype(&::symbol) field = nullptr;
  GONCCL_LIBRARY_FUNCTIONS(GONCCL_LIBRARY_FIELD)
#undef GONCCL_LIBRARY_FIELD
};

// Loads libgonccl.so from path (once per process; later calls return the same
// table whatever path they pass) and records the loading process's pid.
// Throws c10::Error if the library or one of its symbols cannot be found or
// its major version is not gonccl.h's, and the fork error if this process is
// a fork of the one that loaded it.
const Library& loadLibrary(const std::string& path);

// The loaded table; calls checkNotForked() first. Only valid after loadLibrary.
const Library& lib();

// Throws c10::DistBackendError if the library was loaded by a parent process
// and this process is its fork: the Go runtime cannot run in a forked child,
// and calling into it there hangs.
void checkNotForked();

// True if this process is a fork of the process that loaded the library.
bool isForkedChild();

// True once loadLibrary has succeeded (in this process or its parent).
bool libraryLoaded();

// detail if it is not empty (Go's message, with rank, peer, op and sequence
// number), else goncclGetErrorString(result); never empty.
std::string errorString(goncclResult_t result, const char* detail);

// The message of an op that failed with result: "gonccl: <op> failed:
// <detail>", or for a timeout "gonccl: <op>: Timed out after <timeout> ms:
// <detail>" (detail names the op's sequence number and the ranks that did not
// take part).
std::string opFailure(
    const char* op,
    goncclResult_t result,
    const char* detail,
    std::chrono::milliseconds timeout);

}  // namespace gonccl
