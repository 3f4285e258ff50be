#include "library.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include <c10/util/Exception.h>

namespace gonccl {
namespace {

std::mutex loadMutex;
Library table;
std::atomic<bool> loaded{false};
pid_t loaderPid = 0;

template <typename Fn>
void bind(void* handle, const std::string& path, const char* name, Fn& slot) {
  dlerror();
  void* sym = dlsym(handle, name);
  const char* err = dlerror();
  TORCH_CHECK(
      sym != nullptr && err == nullptr,
      "gonccl: ",
      path,
      " has no symbol ",
      name,
      " (",
      err ? err : "null",
      "); is it an older libgonccl.so than this extension?");
  slot = reinterpret_cast<Fn>(sym);
}

// Like bind, but leaves slot null if the symbol is missing; returns whether it
// was found.
template <typename Fn>
bool bindOptional(void* handle, const char* name, Fn& slot) {
  dlerror();
  void* sym = dlsym(handle, name);
  slot = dlerror() == nullptr ? reinterpret_cast<Fn>(sym) : nullptr;
  return slot != nullptr;
}

}  // namespace

bool isForkedChild() {
  return loaded.load(std::memory_order_acquire) && getpid() != loaderPid;
}

void checkNotForked() {
  if (isForkedChild()) {
    C10_THROW_ERROR(
        DistBackendError,
        "gonccl: this process was forked after gonccl was loaded; the Go "
        "runtime cannot run in a forked child — create the process group in "
        "the child instead");
  }
}

const Library& loadLibrary(const std::string& path) {
  std::lock_guard<std::mutex> guard(loadMutex);
  if (loaded.load(std::memory_order_acquire)) {
    checkNotForked();
    return table;
  }
  // RTLD_LAZY: the Go library leaves nvml* symbols to be resolved on use.
  // RTLD_LOCAL: its symbols stay out of the global namespace.
  void* handle = dlopen(path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = dlerror();
    TORCH_CHECK(
        false, "gonccl: cannot load ", path, ": ", err ? err : "unknown error");
  }
  Library t{};
  bind(handle, path, "goncclGetVersion", t.getVersion);
  bind(handle, path, "goncclGetUniqueId", t.getUniqueId);
  bind(handle, path, "goncclCommInitRankTimeout", t.commInitRankTimeout);
  bind(handle, path, "goncclCommDestroy", t.commDestroy);
  bind(handle, path, "goncclCommAbort", t.commAbort);
  bind(handle, path, "goncclGetErrorString", t.getErrorString);
  bind(handle, path, "goncclGetLastError", t.getLastError);
  bind(handle, path, "goncclAllReduceAsync", t.allReduceAsync);
  bind(handle, path, "goncclBroadcastAsync", t.broadcastAsync);
  bind(handle, path, "goncclAllGatherAsync", t.allGatherAsync);
  bind(handle, path, "goncclBarrierAsync", t.barrierAsync);
  bind(handle, path, "goncclRequestWait", t.requestWait);
  bind(handle, path, "goncclRequestOnComplete", t.requestOnComplete);
  bind(handle, path, "goncclRequestErrorString", t.requestErrorString);
  bind(handle, path, "goncclRequestFree", t.requestFree);
  bool all = true;
  all &= bindOptional(handle, "goncclReduceAsync", t.reduceAsync);
  all &= bindOptional(handle, "goncclReduceScatterAsync", t.reduceScatterAsync);
  all &= bindOptional(handle, "goncclGatherAsync", t.gatherAsync);
  all &= bindOptional(handle, "goncclScatterAsync", t.scatterAsync);
  all &= bindOptional(handle, "goncclAlltoAllAsync", t.alltoAllAsync);
  all &= bindOptional(handle, "goncclAlltoAllvAsync", t.alltoAllvAsync);
  all &= bindOptional(handle, "goncclSendAsync", t.sendAsync);
  all &= bindOptional(handle, "goncclRecvAsync", t.recvAsync);
  all &= bindOptional(handle, "goncclRequestSource", t.requestSource);
  all &= bindOptional(handle, "goncclGroupStart", t.groupStart);
  all &= bindOptional(handle, "goncclGroupEnd", t.groupEnd);
  t.fullSurface = all;
  bindOptional(handle, "goncclStreamCheck", t.streamCheck);
  bindOptional(handle, "goncclRequestHoldStream", t.requestHoldStream);
  bindOptional(handle, "goncclRequestReleaseStream", t.requestReleaseStream);
  bindOptional(handle, "goncclRequestTest", t.requestTest);
  bindOptional(handle, "goncclDebugHops", t.debugHops);
  bindOptional(handle, "goncclCommSetTimeout", t.commSetTimeout);
  bindOptional(handle, "goncclCommInitRankConfig", t.commInitRankConfig);
  bindOptional(handle, "goncclCommInitRankEpoch", t.commInitRankEpoch);
  bindOptional(handle, "goncclCommEpoch", t.commEpoch);
  // The handle is never closed: a Go runtime cannot be unloaded.
  int version = 0;
  TORCH_CHECK(
      t.getVersion(&version) == goncclSuccess &&
          version / 10000 == GONCCL_MAJOR,
      "gonccl: ",
      path,
      " is version ",
      version,
      " but this extension was built with gonccl.h ",
      GONCCL_VERSION_CODE,
      " (major versions must match); rebuild the package");
  table = t;
  loaderPid = getpid();
  loaded.store(true, std::memory_order_release);
  return table;
}

bool libraryLoaded() {
  return loaded.load(std::memory_order_acquire) && !isForkedChild();
}

const Library& lib() {
  TORCH_INTERNAL_ASSERT(
      loaded.load(std::memory_order_acquire),
      "gonccl: libgonccl.so used before it was loaded");
  checkNotForked();
  return table;
}

void missingSymbol(const char* symbol, const char* op) {
  C10_THROW_ERROR(
      DistBackendError,
      c10::str(
          "gonccl: ",
          op,
          " is not supported: ",
          symbol,
          " is not available in this libgonccl.so (it predates it; rebuild "
          "the package)"));
}

std::string errorString(goncclResult_t result, const char* detail) {
  if (detail != nullptr && *detail != '\0') {
    return detail;
  }
  const char* name =
      table.getErrorString ? table.getErrorString(result) : nullptr;
  if (name != nullptr && *name != '\0') {
    return name;
  }
  return "gonccl result " + std::to_string(static_cast<int>(result));
}

std::string opFailure(
    const char* op,
    goncclResult_t result,
    const char* detail,
    std::chrono::milliseconds timeout) {
  if (result == goncclTimeout) {
    return c10::str(
        "gonccl: ",
        op,
        ": Timed out after ",
        timeout.count(),
        " ms: ",
        errorString(result, detail));
  }
  return c10::str("gonccl: ", op, " failed: ", errorString(result, detail));
}

}  // namespace gonccl
