#include "work.hpp"

#include <Python.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <exception>
#include <utility>

#include <ATen/core/jit_type.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>
#include <ATen/core/grad_mode.h>

#include "cuda.hpp"
#include "deadline.hpp"
#include "hops.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

std::exception_ptr distError(const std::string& msg) {
  return std::make_exception_ptr(c10::DistBackendError(
      c10::SourceLocation{__func__, __FILE__, __LINE__}, msg));
}

// How often a wait without a deadline of its own looks for pending signals.
constexpr auto kSignalSlice = std::chrono::milliseconds(100);

// Runs Python's pending signal handlers if this thread is a Python thread
// (torch calls wait() with the GIL released); throws what a handler raised,
// such as KeyboardInterrupt for Ctrl-C. Threads Python does not know (DDP's
// reducer) are left alone.
void checkPythonSignals() {
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() == nullptr) {
    return;
  }
  pybind11::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) {
    throw pybind11::error_already_set();
  }
}

std::atomic<uint64_t> nextCompletionKey{1};

std::vector<c10::Device> devicesOf(const std::optional<c10::Stream>& stream) {
  if (!stream) {
    return {};
  }
  return {stream->device()};
}

std::atomic<unsigned long> signalThread{0};

}  // namespace

void setSignalThread(unsigned long ident) {
  signalThread.store(ident);
}

bool onSignalThread() {
  const unsigned long ident = signalThread.load();
  return ident != 0 && PyThread_get_thread_ident() == ident;
}

GoncclWork::GoncclWork(
    int rank,
    c10d::OpType opType,
    const char* profilingTitle,
    const char* opName,
    uint64_t seq,
    std::vector<at::Tensor> inputs,
    std::vector<at::Tensor> outputs,
    std::vector<at::Tensor> keepAlive,
    std::function<void()> postComplete,
    std::optional<c10::Stream> stream)
    // The base class opens the profiler range (with the inputs' shapes) when
    // profilingTitle is set; finish() closes it.
    : c10d::Work(rank, opType, profilingTitle, inputs),
      opName_(opName),
      seq_(seq),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      keepAlive_(std::move(keepAlive)),
      postComplete_(std::move(postComplete)),
      stream_(std::move(stream)),
      // A CUDA op's future records events on the device's current stream when
      // it completes (the gonccl stream: see complete()) and makes its users
      // wait on them.
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), devicesOf(stream_))),
      futureResult_(
          c10::make_intrusive<c10::ivalue::Future>(c10::IntType::get())),
      issued_(std::chrono::steady_clock::now()),
      completionKey_(nextCompletionKey.fetch_add(1)) {}

GoncclWork::~GoncclWork() {
  if (requests_.empty() || isForkedChild()) {
    // A forked child must not call into Go: its requests are leaked.
    return;
  }
  try {
    const Library& L = lib();
    for (goncclRequest_t request : requests_) {
      L.requestFree(request);
    }
  } catch (const std::exception& e) {
    TORCH_WARN("gonccl: ", opName_, ": freeing requests failed: ", e.what());
  }
}

void GoncclWork::adoptRequest(goncclRequest_t request) {
  std::lock_guard<std::mutex> guard(partsMutex_);
  requests_.push_back(request);
}

void GoncclWork::addMember(c10::intrusive_ptr<GoncclWork> member) {
  members_.push_back(std::move(member));
}

// One function on purpose, though long: the stream guard below must stay in
// scope from the copy-out until the future has recorded its events, and the
// steps after it run in the order torch's observers rely on (getError and
// abort hooks, profiler range, future, result future, completion hooks).
void GoncclWork::complete(const std::string& error) {
  // A CUDA op's copy-out and the events its future records go on the gonccl
  // stream, behind the op's host->device copies.
  std::optional<c10::StreamGuard> onStream;
  if (stream_ && error.empty()) {
    try {
      onStream.emplace(*stream_);
    } catch (const std::exception& e) {
      TORCH_WARN(
          "gonccl: ", opName_, ": selecting its stream failed: ", e.what());
    }
  }
  std::string msg = error;
  if (msg.empty() && postComplete_) {
    try {
      // The completion thread has no autograd state of its own: copy-outs into
      // tensors that require grad must not be recorded.
      at::NoGradGuard noGrad;
      postComplete_();
    } catch (const std::exception& e) {
      msg = std::string("gonccl: ") + opName_ +
            ": copying the result out failed: " + e.what();
    }
  }
  if (msg.empty() && onStream) {
    // What wait() makes the caller's stream wait on: the host->device copies
    // and the copy-out above, all on the gonccl stream.
    try {
      done_.emplace(c10::DeviceType::CUDA);
      done_->record(*stream_);
    } catch (const std::exception& e) {
      done_.reset();
      msg = std::string("gonccl: ") + opName_ +
            ": recording its completion event failed: " + e.what();
    }
  }
  // The copy-out is queued: the communicator's next op may queue its copies.
  releaseHolds();
  postComplete_ = nullptr;
  keepAlive_.clear();
  std::function<bool(std::chrono::milliseconds)> dropped;
  {
    std::lock_guard<std::mutex> guard(partsMutex_);
    dropped = std::move(inline_);
    inline_ = nullptr;
  }
  std::exception_ptr eptr = msg.empty() ? nullptr : distError(msg);
  goncclResult_t result = goncclSuccess;
  if (eptr) {
    result = static_cast<goncclResult_t>(result_.load());
    if (result == goncclSuccess) {
      result = goncclInternalError;  // failed after the op (the copy-out)
    }
  }
  finished_ = std::chrono::steady_clock::now();
  if (state_ && eptr) {
    state_->failed(result);  // getError, and the abort hooks' dump, first
  }
  endProfilingRange();
  try {
    if (eptr) {
      future_->setError(eptr);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  } catch (const std::exception& e) {
    // A callback attached to the future threw; the op itself is done.
    TORCH_WARN("gonccl: ", opName_, ": a future callback failed: ", e.what());
  }
  completedAt_ = hops::now();
  finish(eptr);
  const c10d::WorkResult workResult =
      result == goncclSuccess
          ? c10d::WorkResult::SUCCESS
          : (result == goncclTimeout ? c10d::WorkResult::TIMEOUT
                                     : c10d::WorkResult::COMM_ERROR);
  try {
    futureResult_->markCompleted(c10::IValue(static_cast<int64_t>(workResult)));
  } catch (const std::exception& e) {
    TORCH_WARN(
        "gonccl: ", opName_, ": a result future callback failed: ", e.what());
  }
  if (state_) {
    state_->finished(*this, result);
  }
}

void GoncclWork::attach(
    std::shared_ptr<BackendState> state, std::chrono::milliseconds timeout) {
  timed_ = state && state->timing();
  state_ = std::move(state);
  timeout_ = timeout;
}

void GoncclWork::noteResult(goncclResult_t result) {
  if (result == goncclSuccess) {
    return;
  }
  int none = goncclSuccess;
  result_.compare_exchange_strong(none, static_cast<int>(result));
}

std::optional<float> GoncclWork::durationMs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!timed_ || !completed_) {
    return std::nullopt;
  }
  return std::chrono::duration<float, std::milli>(finished_ - issued_).count();
}

float GoncclWork::getDuration() const {
  TORCH_CHECK(
      timed_,
      "gonccl: ",
      opName_,
      ": getDuration needs collective timing, which was off when the op was "
      "issued (turn it on with the backend's _enable_collectives_timing())");
  std::optional<float> ms = durationMs();
  TORCH_CHECK(
      ms.has_value(),
      "gonccl: ",
      opName_,
      ": getDuration: the op has not finished yet");
  return *ms;
}

c10::intrusive_ptr<c10::ivalue::Future> GoncclWork::getFutureResult() {
  return futureResult_;
}

void GoncclWork::setInlineCompletion(
    std::function<bool(std::chrono::milliseconds)> fn) {
  std::lock_guard<std::mutex> guard(partsMutex_);
  inline_ = std::move(fn);
}

void GoncclWork::endProfilingRange() {
  // Whoever waits on the future (DDP's reducer, get_future().wait()) may stop
  // torch's profiler as soon as it is marked complete; ending the range after
  // that, from this thread, races with the profiler collecting its trace and
  // corrupts its buffers (heap corruption, a crash at exit). c10d::Work::finish
  // would end it only after the future, so it is ended here, first.
  std::lock_guard<std::mutex> lock(mutex_);
  if (recordFunctionEndCallback_) {
    recordFunctionEndCallback_();
    recordFunctionEndCallback_ = nullptr;
  }
}

void GoncclWork::releaseHolds() {
  if (!stream_ || isForkedChild()) {
    return;
  }
  std::vector<goncclRequest_t> requests;
  {
    std::lock_guard<std::mutex> guard(partsMutex_);
    requests = requests_;
  }
  try {
    const Library& L = lib();
    for (goncclRequest_t request : requests) {
      L.requestReleaseStream(request);
    }
  } catch (const std::exception& e) {
    TORCH_WARN(
        "gonccl: ", opName_, ": releasing its stream failed: ", e.what());
  }
}

void GoncclWork::expectParts(size_t n, std::string issueError) {
  std::lock_guard<std::mutex> guard(partsMutex_);
  partsLeft_ = n;
  partsError_ = std::move(issueError);
}

void GoncclWork::partDone(const std::string& error) {
  std::string result;
  {
    std::lock_guard<std::mutex> guard(partsMutex_);
    if (partsError_.empty()) {
      partsError_ = error;
    }
    if (partsLeft_ == 0 || --partsLeft_ > 0) {
      return;
    }
    result = partsError_;
  }
  complete(result);
}

int GoncclWork::sourceRank() const {
  const int rank = sourceRank_.load();
  TORCH_CHECK(
      recordsSource_ && rank >= 0,
      "gonccl: ",
      opName_,
      ": the source rank is only known for a finished receive from any "
      "source");
  return rank;
}

void GoncclWork::fail(const std::string& error) {
  postComplete_ = nullptr;
  complete(error);
}

bool GoncclWork::wait(std::chrono::milliseconds timeout) {
  std::function<bool(std::chrono::milliseconds)> completeHere;
  {
    std::lock_guard<std::mutex> guard(partsMutex_);
    completeHere = inline_;
  }
  // c10d's kNoTimeout (0) is no limit of the wait's own; any other timeout is
  // one deadline that the latency path below spends part of, and a timeout
  // below 0 has passed at once.
  const bool bounded = timeout != kNoTimeout;
  const Clock::time_point deadline = deadlineAfter(Clock::now(), timeout);
  // The latency path: wait for the op in Go and complete it on this thread,
  // for at most the timeout (at least 1 ms: 0 would be no limit to it).
  const bool completedHere =
      completeHere &&
      completeHere(
          bounded ? std::max(timeout, std::chrono::milliseconds(1))
                  : kNoTimeout);
  completeHere = nullptr;
  std::unique_lock<std::mutex> lock(mutex_);
  const bool waited = !completed_;
  if (!bounded) {
    // The op has its own deadline (the process group's timeout) in Go, so this
    // always ends; waiting in slices lets Ctrl-C interrupt it before that.
    while (!cv_.wait_for(lock, kSignalSlice, [this] { return completed_; })) {
      lock.unlock();
      checkPythonSignals();
      lock.lock();
    }
  } else if (!cv_.wait_until(lock, deadline, [this] { return completed_; })) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl: ",
            opName_,
            " (seq ",
            seq_,
            "): Timed out after ",
            timeout.count(),
            " ms in Work.wait(); the op is still pending and ends at its "
            "own timeout (",
            timeout_.count(),
            " ms)"));
  }
  if (!completedHere && waited) {
    hops::since(hops::kWake, completedAt_);
  }
  hops::since(hops::kIssueToWait, issuedAt_);
  if (exception_) {
    std::rethrow_exception(exception_);
  }
  lock.unlock();
  waitStreams();
  return true;
}

void GoncclWork::synchronize() {
  wait(kNoTimeout);
}

void GoncclWork::waitStreams() {
  for (const auto& member : members_) {
    member->waitStreams();
  }
  if (!stream_ || !done_) {
    return;
  }
  // An event block, not a raw stream handle: it works for torch's default
  // stream (whose handle is NULL) like for any other.
  done_->block(cuda::currentStream(stream_->device_index()));
}

c10::intrusive_ptr<c10::ivalue::Future> GoncclWork::getFuture() {
  return future_;
}

std::vector<at::Tensor> GoncclWork::result() {
  return outputs_;
}

uint64_t GoncclWork::getSequencenumber() const {
  return seq_;
}

}  // namespace gonccl
