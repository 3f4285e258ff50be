#include <cstdlib>
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
  Library t;
#define GONCCL_LIBRARY_BIND(field, symbol) bind(handle, path, #symbol, t.field);
  GONCCL_LIBRARY_FUNCTIONS(GONCCL_LIBRARY_BIND)
#undef GONCCL_LIBRARY_BIND
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

// traceHint is the next step a timeout's message suggests: the flight recorder
// (GONCCL_TRACE_DUMP_DIR) and python -m gonccl.trace, which names the rank
// behind. A message that names the rank it waited for needs no help finding it:
// it gets only where the recorders are, if they were written.
static std::string traceHint(bool rankNamed) {
  const char* dir = std::getenv("GONCCL_TRACE_DUMP_DIR");
  if (dir != nullptr && *dir != '\0') {
    return c10::str(
        " (every rank's flight recorder is in ",
        dir,
        ": python -m gonccl.trace ",
        dir,
        " shows what each rank last ran)");
  }
  if (rankNamed) {
    return "";
  }
  return " (to see which rank is behind, rerun with GONCCL_TRACE_DUMP_DIR=DIR "
         "and run python -m gonccl.trace DIR)";
}

std::string opFailure(
    const char* op,
    goncclResult_t result,
    const char* detail,
    std::chrono::milliseconds timeout) {
  const std::string why = errorString(result, detail);
  // The library's own messages start "gonccl rank N: <op> #seq ...": they name
  // the op and the rank already, and take no second prefix.
  const bool named = why.rfind("gonccl rank ", 0) == 0;
  if (result == goncclTimeout) {
    // Every timeout says "Timed out", spaces around it: what torch's tests and
    // the users' scripts look for. The library's waits for a peer say it
    // themselves, with the limit and the rank waited for.
    const bool said = why.find(" Timed out ") != std::string::npos;
    const bool rankNamed = why.find("waiting for rank ") != std::string::npos;
    if (named && said) {
      return c10::str(why, traceHint(rankNamed));
    }
    if (named) {
      return c10::str(
          why,
          "; Timed out after ",
          timeout.count(),
          " ms",
          traceHint(rankNamed));
    }
    return c10::str(
        "gonccl: ",
        op,
        ": Timed out after ",
        timeout.count(),
        " ms: ",
        why,
        traceHint(rankNamed));
  }
  if (named) {
    return why;
  }
  return c10::str("gonccl: ", op, " failed: ", why);
}

}  // namespace gonccl
