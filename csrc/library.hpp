// library.hpp: loads libgonccl.so at run time and holds its entry points.
//
// The extension never links against libgonccl.so: the Go library carries
// undefined nvml* symbols (RTLD_NOW would fail) and starting the Go runtime at
// `import gonccl` would make every later fork() hang the child. So the library
// is dlopen'ed with RTLD_LAZY on first use and every gonccl* function is called
// through the table below.
#pragma once

#include <chrono>
#include <string>

#include "gonccl.h"

namespace gonccl {

// Entry points of libgonccl.so, filled by dlsym. Types come from gonccl.h.
struct Library {
  decltype(&::goncclGetVersion) getVersion;
  decltype(&::goncclGetUniqueId) getUniqueId;
  decltype(&::goncclCommInitRankTimeout) commInitRankTimeout;
  decltype(&::goncclCommDestroy) commDestroy;
  decltype(&::goncclCommAbort) commAbort;
  decltype(&::goncclGetErrorString) getErrorString;
  decltype(&::goncclGetLastError) getLastError;
  decltype(&::goncclAllReduceAsync) allReduceAsync;
  decltype(&::goncclBroadcastAsync) broadcastAsync;
  decltype(&::goncclAllGatherAsync) allGatherAsync;
  decltype(&::goncclBarrierAsync) barrierAsync;
  decltype(&::goncclRequestWait) requestWait;
  decltype(&::goncclRequestOnComplete) requestOnComplete;
  decltype(&::goncclRequestErrorString) requestErrorString;
  decltype(&::goncclRequestFree) requestFree;

  // The rest of the collective surface. Resolved if present, null otherwise, so
  // that an extension built against the full header still loads a library
  // that predates them; call them through need().
  decltype(&::goncclReduceAsync) reduceAsync;
  decltype(&::goncclReduceScatterAsync) reduceScatterAsync;
  decltype(&::goncclGatherAsync) gatherAsync;
  decltype(&::goncclScatterAsync) scatterAsync;
  decltype(&::goncclAlltoAllAsync) alltoAllAsync;
  decltype(&::goncclAlltoAllvAsync) alltoAllvAsync;
  decltype(&::goncclSendAsync) sendAsync;
  decltype(&::goncclRecvAsync) recvAsync;
  decltype(&::goncclRequestSource) requestSource;
  decltype(&::goncclGroupStart) groupStart;
  decltype(&::goncclGroupEnd) groupEnd;

  // The CUDA path (device buffers on a stream). Resolved if present, null
  // otherwise; not part of fullSurface: CUDA ops need() them.
  decltype(&::goncclStreamCheck) streamCheck;
  decltype(&::goncclRequestHoldStream) requestHoldStream;
  decltype(&::goncclRequestReleaseStream) requestReleaseStream;
  // Changing the timeout of later ops (set_timeout, per-call timeouts).
  // Resolved if present; without it every op keeps the group's initial
  // timeout.
  decltype(&::goncclCommSetTimeout) commSetTimeout;
  // Per-communicator settings (GoncclOptions' algorithm and chunk_size).
  decltype(&::goncclCommInitRankConfig) commInitRankConfig;

  // Latency paths: a waiter that completes its op itself (goncclRequestTest
  // tells a finished op's timeout from a wait's), and per-hop timing. Resolved
  // if present, null otherwise.
  decltype(&::goncclRequestTest) requestTest;
  decltype(&::goncclDebugHops) debugHops;

  // Membership epochs (shrink, reconfigure). Resolved if present, null
  // otherwise; shrink and reconfigure need() them.
  decltype(&::goncclCommInitRankEpoch) commInitRankEpoch;
  decltype(&::goncclCommEpoch) commEpoch;

  // True if every optional entry point above was found. The dtypes and reduce
  // ops that came with them (bool, int16, uint16/32/64, float8, complex;
  // BAND/BOR/BXOR) are only used when this is true.
  bool fullSurface = false;
};

// fn if it is not null, else throws DistBackendError "gonccl: <op> is not
// supported: <symbol> is not available in this libgonccl.so".
template <typename Fn>
Fn need(Fn fn, const char* symbol, const char* op);

// Throws the error need() throws.
[[noreturn]] void missingSymbol(const char* symbol, const char* op);

template <typename Fn>
Fn need(Fn fn, const char* symbol, const char* op) {
  if (fn == nullptr) {
    missingSymbol(symbol, op);
  }
  return fn;
}

// Loads libgonccl.so from path (once per process; later calls return the same
// table whatever path they pass) and records the loading process's pid.
// Throws c10::Error if the library or one of its symbols cannot be found, and
// the fork error if this process is a fork of the one that loaded it.
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
