// issue.cpp: how GoncclBackend issues one op: the communicator, the device
// and stream of its tensors, its time limit, its Work, and the requests that
// the op's start function hands to Go, tracked until they complete.
#include <algorithm>
#include <exception>
#include <optional>
#include <string>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "cuda.hpp"
#include "gil.hpp"
#include "hops.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

// The per-call time limit of the ops this thread issues (CallTimeout).
thread_local std::chrono::milliseconds callTimeout = c10d::kUnsetTimeout;

// The outermost collective this thread is checking, and whether any of it has
// been handed to Go (Checking).
thread_local GoncclBackend::Checking* checking = nullptr;
thread_local bool handedToGo = false;

}  // namespace

GoncclBackend::Checking::Checking(GoncclBackend& backend, goncclOpKind_t kind)
    : backend_(backend),
      kind_(kind),
      uncaught_(std::uncaught_exceptions()),
      outer_(checking) {
  checking = this;
  if (outer_ == nullptr) {
    handedToGo = false;
    lastFailure().clear();
  }
}

GoncclBackend::Checking::~Checking() {
  checking = outer_;
  if (outer_ == nullptr && !handedToGo &&
      std::uncaught_exceptions() > uncaught_) {
    backend_.refuse(kind_, lastFailure());
  }
}

void GoncclBackend::Checking::issued() {
  handedToGo = true;
}

void GoncclBackend::refuse(
    goncclOpKind_t kind, const std::string& reason) noexcept {
  try {
    if (!libraryLoaded() || isForkedChild()) {
      return;
    }
    GilRelease noGil;  // it waits (briefly) for the word to go out
    std::lock_guard<std::mutex> guard(issueMutex_);
    if (closed_ || comm_ == nullptr || estimating_) {
      return;
    }
    const std::string why =
        reason.empty() ? "a check of its arguments failed before the call"
                       : reason;
    lib().commRefuse(comm_, kind, why.c_str());
  } catch (...) {
    // Best effort: the caller's own exception is what matters here.
  }
}

GoncclBackend::CallTimeout::CallTimeout(std::chrono::milliseconds timeout)
    : previous_(callTimeout) {
  callTimeout = timeout;
}

GoncclBackend::CallTimeout::~CallTimeout() {
  callTimeout = previous_;
}

goncclComm_t GoncclBackend::liveComm(const char* op) {
  checkNotForked();
  if (closed_) {
    fail<c10::DistBackendError>(
        op, "the process group has been shut down or aborted");
  }
  if (comm_ == nullptr) {
    fail<c10::DistBackendError>(
        op,
        "the process group has no communicator yet (it was created with "
        "enable_reconfigure: call reconfigure first)");
  }
  return comm_;
}

c10::intrusive_ptr<GoncclWork> GoncclBackend::issue(Op op, Start start) {
  // Go blocks the issuing thread while the communicator's queue is full
  // (GONCCL_QUEUE_DEPTH), until the executor makes room: other Python threads
  // must run meanwhile, and one waiting for issueMutex_ must not hold the GIL.
  const int64_t issuedAt = hops::now();
  GilRelease noGil;
  // One op at a time: the sequence number and the order Go sees must agree.
  std::lock_guard<std::mutex> guard(issueMutex_);
  Parts parts;
  parts.comm = liveComm(op.name);
  if (estimating_) {
    return recordEstimate(op, parts.comm);
  }
  const std::optional<c10::Stream> stream = opStream(op, parts);
  const bool holds = stream && op.postComplete;
  auto work = c10::make_intrusive<GoncclWork>(
      rank_,
      op.type,
      op.name.title,
      op.name,
      seq_ + 1,
      std::move(op.inputs),
      std::move(op.outputs),
      std::move(op.keepAlive),
      std::move(op.postComplete),
      stream);
  if (op.anySource) {
    work->recordSourceRank();
  }
  work->setIssuedAt(issuedAt);
  const std::chrono::milliseconds timeout = opTimeout(callTimeout, work);
  work->attach(state_, timeout);
  work->setErrorNote(rankNote_);
  setCommTimeout(parts.comm, timeout, op.name);
  goncclResult_t rc = start(parts);
  if (rc == goncclSuccess || !parts.requests.empty()) {
    Checking::issued();
  }
  if (holds) {
    // The copy-out comes after the op on the gonccl stream, and the next op
    // (issued after this returns) must queue its copies after it: the Work
    // releases these holds once the copy-out is queued.
    for (goncclRequest_t request : parts.requests) {
      lib().requestHoldStream(request);
    }
  }
  std::string error;
  if (rc != goncclSuccess) {
    work->noteResult(rc);
    error = opFailure(
                op.name, rc, lib().getLastError(parts.comm), work->timeout()) +
            rankNote_;
  }
  if (parts.requests.empty()) {
    if (!error.empty()) {
      work->fail(error);
      lastFailure() = error;  // nothing reached Go: the peers hear it
      C10_THROW_ERROR(DistBackendError, error);
    }
    ++seq_;
    work->complete("");
  } else {
    ++seq_;
    work->expectParts(parts.requests.size(), error);
    // A waiter may complete an op of one request on host memory itself.
    const bool waiterMayComplete = parts.requests.size() == 1 &&
                                   error.empty() && !stream && hops::fastPath();
    for (goncclRequest_t request : parts.requests) {
      queue_->track(work, request, waiterMayComplete);
    }
    if (!error.empty()) {
      C10_THROW_ERROR(DistBackendError, error);
    }
  }
  if (coalescing_) {
    coalesced_.push_back(work);
  }
  hops::since(hops::kIssue, issuedAt);
  return work;
}

std::optional<c10::Stream> GoncclBackend::opStream(const Op& op, Parts& parts) {
  std::vector<at::Tensor> touched;
  for (const auto* list : {&op.inputs, &op.outputs, &op.keepAlive}) {
    for (const at::Tensor& t : *list) {
      if (t.defined()) {
        touched.push_back(t);
      }
    }
  }
  std::vector<c10::Device> devices;
  for (const at::Tensor& t : touched) {
    devices.push_back(t.device());
  }
  const c10::Device device = cuda::opDevice(devices, op.name);
  if (!device.is_cuda()) {
    return std::nullopt;
  }
  const c10::Stream current = cuda::currentStream(device.index());
  // Refused before anything is queued: a capture must not be broken.
  cuda::checkStream(current, op.name);
  const c10::Stream stream = deviceStream(device.index());
  // The op must see what the caller queued before it, the staging done
  // before issue() included.
  cuda::streamWait(stream, current);
  for (const at::Tensor& t : touched) {
    cuda::recordStream(t, stream);
  }
  parts.stream = cuda::handle(stream);
  return stream;
}

c10::Stream GoncclBackend::deviceStream(c10::DeviceIndex device) {
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    it = streams_.emplace(device, cuda::newStream(device)).first;
  }
  return it->second;
}

std::chrono::milliseconds GoncclBackend::opTimeout(
    std::chrono::milliseconds requested,
    const c10::intrusive_ptr<GoncclWork>& work) {
  auto timeout = requested == c10d::kUnsetTimeout ? timeout_ : requested;
  // An extension ends when the first op issued after it has finished.
  extensions_.erase(
      std::remove_if(
          extensions_.begin(),
          extensions_.end(),
          [](const Extension& x) {
            return x.firstWork && x.firstWork->isCompleted();
          }),
      extensions_.end());
  for (Extension& x : extensions_) {
    timeout += x.amount;
    if (!x.firstWork) {
      x.firstWork = work;
    }
  }
  // 0 or less has run out before the op starts: it times out at once (see
  // goncclCommSetTimeout); never negative, which Work.timeout would show.
  return std::max(timeout, std::chrono::milliseconds(0));
}

void GoncclBackend::setCommTimeout(
    goncclComm_t comm, std::chrono::milliseconds timeout, const char* op) {
  if (timeout == commTimeout_) {
    return;
  }
  goncclResult_t rc = lib().commSetTimeout(comm, timeout.count());
  if (rc != goncclSuccess) {
    fail<c10::DistBackendError>(
        op,
        "setting its timeout of ",
        timeout.count(),
        " ms failed: ",
        errorString(rc, lib().getLastError(comm)));
  }
  commTimeout_ = timeout;
}

}  // namespace gonccl
