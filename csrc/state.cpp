#include "state.hpp"

#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include <c10/util/Exception.h>

#include "work.hpp"

namespace gonccl {
namespace {

// Failures after which the communicator cannot be used (Go marks it broken):
// the ones torch's abort hooks are for. A bad argument, an unsupported call or
// the user's own abort is not one.
bool breaksComm(goncclResult_t result) {
  switch (result) {
    case goncclSuccess:
    case goncclInvalidArgument:
    case goncclInvalidUsage:
    case goncclNotSupported:
    case goncclAborted:
      return false;
    default:
      return true;
  }
}

c10d::ErrorType errorType(goncclResult_t result) {
  switch (result) {
    case goncclTimeout:
      return c10d::ErrorType::TIMEOUT;
    case goncclRemoteError:
      return c10d::ErrorType::REMOTE_ERROR;
    default:
      return c10d::ErrorType::COMM_ERROR;
  }
}

template <typename Fn>
void runHook(const char* what, const Fn& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    TORCH_WARN("gonccl: a ", what, " hook failed: ", e.what());
  } catch (...) {
    TORCH_WARN("gonccl: a ", what, " hook failed");
  }
}

}  // namespace

void BackendState::setWorkInfoHook(WorkInfoHook hook) {
  std::lock_guard<std::mutex> guard(mu_);
  workInfoHook_ = std::move(hook);
}

#if GONCCL_HAS_HOOKS
void BackendState::registerCompletionHook(
    int64_t id, c10d::CompletionHook hook) {
  std::lock_guard<std::mutex> guard(mu_);
  completionHooks_[id] = std::move(hook);
}

void BackendState::unregisterCompletionHook(int64_t id) {
  std::lock_guard<std::mutex> guard(mu_);
  completionHooks_.erase(id);
}

void BackendState::registerAbortHook(int64_t id, c10d::AbortHook hook) {
  std::lock_guard<std::mutex> guard(mu_);
  abortHooks_[id] = std::move(hook);
}

void BackendState::unregisterAbortHook(int64_t id) {
  std::lock_guard<std::mutex> guard(mu_);
  abortHooks_.erase(id);
}
#endif

void BackendState::failed(goncclResult_t result) {
  if (!breaksComm(result)) {
    return;
  }
  int none = static_cast<int>(c10d::ErrorType::SUCCESS);
  error_.compare_exchange_strong(none, static_cast<int>(errorType(result)));
#if GONCCL_HAS_HOOKS
  std::vector<c10d::AbortHook> abortHooks;
  {
    std::lock_guard<std::mutex> guard(mu_);
    for (const auto& [id, hook] : abortHooks_) {
      abortHooks.push_back(hook);
    }
  }
  for (const auto& hook : abortHooks) {
    runHook("abort", [&] { hook(); });
  }
#endif
}

void BackendState::finished(GoncclWork& work, goncclResult_t result) {
  WorkInfoHook infoHook;
#if GONCCL_HAS_HOOKS
  std::vector<c10d::CompletionHook> completionHooks;
#endif
  {
    std::lock_guard<std::mutex> guard(mu_);
    infoHook = workInfoHook_;
#if GONCCL_HAS_HOOKS
    if (result == goncclSuccess) {
      for (const auto& [id, hook] : completionHooks_) {
        completionHooks.push_back(hook);
      }
    }
#endif
  }
#if GONCCL_HAS_HOOKS
  if (!completionHooks.empty()) {
    c10d::CompletionHookArgs args;
    args.completionKey = work.getCompletionKey();
    if (timing()) {
      args.duration_ms = work.durationMs();
    }
    for (const auto& hook : completionHooks) {
      runHook("completion", [&] { hook(args); });
    }
  }
#endif
  if (infoHook) {
    runHook("on-completion", [&] {
      infoHook(std::make_shared<c10d::WorkInfo>(
          work.retrieveOpType(),
          work.getSequencenumber(),
          work.issuedAt(),
          work.finishedAt(),
          std::chrono::duration<float>(work.finishedAt() - work.issuedAt())));
    });
  }
}

}  // namespace gonccl
