// state.hpp: BackendState, what a GoncclBackend shares with its Works: the
// hooks torch registers on it, the last error it saw, whether collectives are
// timed. A Work reports to it once, when it has finished (finished()).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "gonccl.h"
#include "torch_compat.hpp"

namespace gonccl {

class GoncclWork;

class BackendState {
 public:
  // torch's completion hook of every backend version
  // (registerOnCompletionHook): called with each finished Work's op type,
  // sequence number, times.
  using WorkInfoHook = std::function<void(std::shared_ptr<c10d::WorkInfo>)>;

  void enableTiming() {
    timing_.store(true);
  }
  bool timing() const {
    return timing_.load();
  }

  // The kind of the first failure any op of the backend had (SUCCESS if none).
  c10d::ErrorType error() const {
    return static_cast<c10d::ErrorType>(error_.load());
  }

  void setWorkInfoHook(WorkInfoHook hook);

#if GONCCL_HAS_HOOKS
  void registerCompletionHook(int64_t id, c10d::CompletionHook hook);
  void unregisterCompletionHook(int64_t id);
  void registerAbortHook(int64_t id, c10d::AbortHook hook);
  void unregisterAbortHook(int64_t id);
#endif

  // A Work failed with result. Called before the Work reports the failure to
  // anyone (its future, wait()): if the failure breaks the communicator (a
  // timeout, a lost or failed peer, a mismatch) records it for getError (the
  // first wins) and runs the abort hooks, through which torch's flight
  // recorder dumps its trace, so the dump is whole by the time the program
  // sees the error (and may exit). Runs no hook under a lock. Never throws.
  void failed(goncclResult_t result);

  // work has finished with result (goncclSuccess, or the failure's code), and
  // has reported it. On success runs the completion hooks; always runs the
  // on-completion hook (registerOnCompletionHook). Runs no hook under a lock.
  // Never throws.
  void finished(GoncclWork& work, goncclResult_t result);

 private:
  std::atomic<bool> timing_{false};
  std::atomic<int> error_{static_cast<int>(c10d::ErrorType::SUCCESS)};
  std::mutex mu_;  // guards the hook tables
  WorkInfoHook workInfoHook_;
#if GONCCL_HAS_HOOKS
  std::map<int64_t, c10d::CompletionHook> completionHooks_;
  std::map<int64_t, c10d::AbortHook> abortHooks_;
#endif
};

}  // namespace gonccl
