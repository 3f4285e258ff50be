#include "backend.hpp"

#include <Python.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <ATen/core/grad_mode.h>

#include "checks.hpp"
#include "cuda.hpp"
#include "hops.hpp"
#include "gil.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

constexpr const char* kUniqueIdKey = "gonccl/unique_id";
// How long closing waits for Go to report the requests it has failed or
// finished before giving up on them.
constexpr auto kDrainTimeout = std::chrono::seconds(30);

// The per-call time limit of the ops this thread issues (CallTimeout).
thread_local std::chrono::milliseconds callTimeout = c10d::kUnsetTimeout;

}  // namespace

GoncclBackend::CallTimeout::CallTimeout(std::chrono::milliseconds timeout)
    : previous_(callTimeout) {
  callTimeout = timeout;
}

GoncclBackend::CallTimeout::~CallTimeout() {
  callTimeout = previous_;
}

GoncclBackend::GoncclBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    const std::string& libraryPath,
    uint32_t epoch)
    : GoncclBackend(
          store,
          rank,
          size,
          c10::make_intrusive<GoncclOptions>(timeout),
          libraryPath,
          epoch) {}

GoncclBackend::GoncclBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::intrusive_ptr<GoncclOptions> options,
    const std::string& libraryPath,
    uint32_t epoch)
    : Backend(rank, size),
      libraryPath_(libraryPath),
      options_(std::move(options)),
      timeout_(options_->timeout),
      commTimeout_(options_->timeout),
      store_(store),
      epoch_(epoch) {
  TORCH_CHECK_VALUE(
      size >= 1 && rank >= 0 && rank < size,
      "gonccl: invalid rank ",
      rank,
      " for a group of size ",
      size);
  const std::vector<uint64_t>& global = options_->global_ranks_in_group;
  TORCH_CHECK_VALUE(
      global.empty() || global.size() == static_cast<size_t>(size),
      "gonccl: the options name ",
      global.size(),
      " global ranks for a group of ",
      size);
  bool identity = true;
  for (size_t i = 0; i < global.size(); ++i) {
    identity = identity && global[i] == i;
  }
  if (!identity) {
    rankNote_ = c10::str(
        " (in group '",
        options_->group_name,
        "', whose ranks 0..",
        size - 1,
        " are global ranks ",
        c10::Join(", ", global),
        ")");
  }
  // Go checks that every rank has the same (when they join).
  const bool knobs = !options_->algorithm.empty() || options_->chunk_size != 0;
  const Library& L = loadLibrary(libraryPath);
  hops::configure();

  goncclUniqueId id;
  if (rank == 0) {
    goncclResult_t rc = L.getUniqueId(&id);
    if (rc != goncclSuccess) {
      C10_THROW_ERROR(
          DistBackendError,
          "gonccl: goncclGetUniqueId failed: " +
              errorString(rc, L.getLastError(nullptr)));
    }
    const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal);
    store->set(
        kUniqueIdKey, std::vector<uint8_t>(bytes, bytes + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store->get(kUniqueIdKey);
    TORCH_CHECK(
        bytes.size() == sizeof(id.internal),
        "gonccl: the unique id in the store has ",
        bytes.size(),
        " bytes, expected ",
        sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  goncclResult_t rc;
  if (!knobs && epoch == 0) {
    rc = L.commInitRankTimeout(&comm_, size, id, rank, timeout_.count());
  } else if (!knobs) {
    rc = need(L.commInitRankEpoch, "goncclCommInitRankEpoch", "shrink")(
        &comm_, size, id, rank, timeout_.count(), epoch);
  } else {
    TORCH_CHECK(
        L.commInitRankConfig != nullptr,
        "gonccl: GoncclOptions' algorithm and chunk_size need "
        "goncclCommInitRankConfig, which this libgonccl.so lacks");
    goncclConfig_t config;
    std::memset(&config, 0, sizeof config);
    config.size = sizeof config;
    config.timeoutMs = timeout_.count();
    config.algo = options_->algorithm.c_str();
    config.chunkBytes = options_->chunk_size;
    config.epoch = epoch;
    rc = L.commInitRankConfig(&comm_, size, id, rank, &config);
  }
  if (rc != goncclSuccess) {
    const std::string detail = errorString(rc, L.getLastError(comm_));
    if (knobs && rc == goncclInvalidArgument) {
      TORCH_CHECK_VALUE(
          false, "gonccl: invalid GoncclOptions", rankNote_, ": ", detail);
    }
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl: communicator init failed on rank ",
            rank,
            " of ",
            size,
            rankNote_,
            ": ",
            detail));
  }
  queue_ = CompletionQueue::create();
  init();
}

int GoncclBackend::globalRank(int r) const {
  const std::vector<uint64_t>& global = options_->global_ranks_in_group;
  if (r >= 0 && static_cast<size_t>(r) < global.size()) {
    return static_cast<int>(global[r]);
  }
  return r;
}

GoncclBackend::~GoncclBackend() {
  try {
    close(/*abort=*/false);
  } catch (const std::exception& e) {
    TORCH_WARN("gonccl: closing the communicator failed: ", e.what());
  }
}

c10::intrusive_ptr<c10d::Backend::Options> GoncclBackend::getBackendOptions() {
  std::lock_guard<std::mutex> guard(issueMutex_);
  auto options = c10::make_intrusive<GoncclOptions>(*options_);
  options->timeout = timeout_;
  return options;
}

uint64_t GoncclBackend::getSequenceNumberForGroup() {
  std::lock_guard<std::mutex> guard(issueMutex_);
  return seq_;
}

goncclComm_t GoncclBackend::liveComm(const char* op) {
  checkNotForked();
  if (closed_) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl: ",
            op,
            ": the process group has been shut down or aborted"));
  }
  if (comm_ == nullptr) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl: ",
            op,
            ": the process group has no communicator yet (it was created "
            "with enable_reconfigure: call reconfigure first)"));
  }
  return comm_;
}

c10::intrusive_ptr<GoncclWork> GoncclBackend::issue(Op op, const Start& start) {
  // Go blocks the issuing thread while the communicator's queue is full
  // (GONCCL_QUEUE_DEPTH), until the executor makes room: other Python threads
  // must run meanwhile, and one waiting for issueMutex_ must not hold the GIL.
  const int64_t issuedAt = hops::now();
  GilRelease noGil;
  // One op at a time: the sequence number and the order Go sees must agree.
  std::lock_guard<std::mutex> guard(issueMutex_);
  Parts parts;
  parts.comm = liveComm(op.name);
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
  std::optional<c10::Stream> stream;
  const bool holds = device.is_cuda() && op.postComplete;
  if (device.is_cuda()) {
    if (holds) {
      need(lib().requestHoldStream, "goncclRequestHoldStream", op.name);
    }
    const c10::Stream current = cuda::currentStream(device.index());
    // Refused before anything is queued: a capture must not be broken.
    cuda::checkStream(current, op.name);
    stream = deviceStream(device.index());
    // The op must see what the caller queued before it, the staging above
    // included.
    cuda::streamWait(*stream, current);
    for (const at::Tensor& t : touched) {
      cuda::recordStream(t, *stream);
    }
    parts.stream = cuda::handle(*stream);
  }
  auto work = c10::make_intrusive<GoncclWork>(
      rank_,
      op.type,
      op.profilingTitle,
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
  if (timeout != commTimeout_ && lib().commSetTimeout != nullptr) {
    goncclResult_t trc = lib().commSetTimeout(parts.comm, timeout.count());
    if (trc != goncclSuccess) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(
              "gonccl: ",
              op.name,
              ": setting its timeout of ",
              timeout.count(),
              " ms failed: ",
              errorString(trc, lib().getLastError(parts.comm))));
    }
    commTimeout_ = timeout;
  }
  goncclResult_t rc = start(parts);
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
  return timeout;
}

void GoncclBackend::setTimeout(std::chrono::milliseconds timeout) {
  TORCH_CHECK_VALUE(
      timeout.count() > 0,
      "gonccl: set_timeout: the timeout must be positive, got ",
      timeout.count(),
      " ms");
  std::lock_guard<std::mutex> guard(issueMutex_);
  TORCH_CHECK(
      lib().commSetTimeout != nullptr,
      "gonccl: set_timeout needs goncclCommSetTimeout, which this "
      "libgonccl.so lacks");
  timeout_ = timeout;
}

#if GONCCL_TORCH_AT_LEAST(2, 15)
void GoncclBackend::addEphemeralTimeout(
    const std::chrono::milliseconds& timeout) {
  std::lock_guard<std::mutex> guard(issueMutex_);
  extensions_.push_back({timeout, nullptr});
}
#endif

c10d::ErrorType GoncclBackend::getError() {
  return state_->error();
}

void GoncclBackend::enableCollectivesTiming() {
  state_->enableTiming();
}

void GoncclBackend::registerOnCompletionHook(
    std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  onCompletionHook_ = hook;  // the base class's, for hasHooks()
  state_->setWorkInfoHook(std::move(hook));
}

void GoncclBackend::waitForPendingWorks() {
  std::shared_ptr<CompletionQueue> queue;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    queue = queue_;
    timeout = timeout_;
  }
  if (!queue) {
    return;
  }
  GilRelease noGil;
  TORCH_CHECK(
      queue->drain(timeout),
      "gonccl: waitForPendingWorks: ",
      queue->pending(),
      " op(s) still pending after ",
      timeout.count(),
      " ms");
}

#if GONCCL_HAS_HOOKS
void GoncclBackend::registerCompletionHook(
    int64_t id, c10d::CompletionHook hook) {
  state_->registerCompletionHook(id, std::move(hook));
}

void GoncclBackend::unregisterCompletionHook(int64_t id) {
  state_->unregisterCompletionHook(id);
}

void GoncclBackend::registerAbortHook(int64_t id, c10d::AbortHook hook) {
  state_->registerAbortHook(id, std::move(hook));
}

void GoncclBackend::unregisterAbortHook(int64_t id) {
  state_->unregisterAbortHook(id);
}
#endif

c10::Stream GoncclBackend::deviceStream(c10::DeviceIndex device) {
  auto it = streams_.find(device);
  if (it == streams_.end()) {
    it = streams_.emplace(device, cuda::newStream(device)).first;
  }
  return it->second;
}

void GoncclBackend::startCoalescing() {
  std::lock_guard<std::mutex> guard(issueMutex_);
  TORCH_CHECK(
      !coalescing_,
      "gonccl: startCoalescing called again before endCoalescing");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::endCoalescing() {
  std::vector<c10::intrusive_ptr<GoncclWork>> works;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    TORCH_CHECK(
        coalescing_, "gonccl: endCoalescing called without startCoalescing");
    coalescing_ = false;
    works = std::exchange(coalesced_, {});
    seq = seq_;
  }
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs;
  // The group's future synchronizes with the members' device if they all ran
  // on one; its wait() makes the current stream wait on every member.
  std::optional<c10::Stream> stream;
  if (!works.empty()) {
    stream = works.front()->stream();
  }
  for (const auto& w : works) {
    for (const at::Tensor& t : w->result()) {
      outputs.push_back(t);
    }
    if (w->stream() != stream) {
      stream.reset();
    }
  }
  auto group = c10::make_intrusive<GoncclWork>(
      rank_,
      c10d::OpType::COALESCED,
      "gonccl:coalesced",
      "coalesced ops",
      seq,
      std::move(inputs),
      std::move(outputs),
      std::vector<at::Tensor>{},
      nullptr,
      stream);
  if (works.empty()) {
    group->complete("");
    return group;
  }
  group->expectParts(works.size());
  for (const auto& w : works) {
    if (w->stream()) {
      group->addMember(w);
    }
    // Runs on the completion thread, or here if w has already finished.
    w->getFuture()->addCallback([group](c10::ivalue::Future& f) {
      group->partDone(f.hasError() ? f.tryRetrieveErrorMessage() : "");
    });
  }
  return group;
}

c10::intrusive_ptr<c10d::Backend> GoncclBackend::split(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  for (int r : ranks) {
    TORCH_CHECK_VALUE(
        r >= 0 && r < size_,
        "gonccl: split: rank ",
        r,
        " is out of range for a group of size ",
        size_);
  }
  liveComm("split");
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) {
    return nullptr;
  }
  // The child's options: the knobs of GoncclOptions given to split_group, or
  // else this group's; torch's timeout and name. Its global ranks follow from
  // this group's (torch hands split the parent's list unchanged).
  c10::intrusive_ptr<GoncclOptions> child;
  if (const auto* given = dynamic_cast<const GoncclOptions*>(opts.get())) {
    child = c10::make_intrusive<GoncclOptions>(*given);
  } else {
    child = c10::make_intrusive<GoncclOptions>(*options_);
    std::lock_guard<std::mutex> guard(issueMutex_);
    child->timeout = timeout_;
    child->group_name = opts ? opts->group_name : "";
  }
  if (opts && opts->timeout.count() > 0) {
    child->timeout = opts->timeout;
  }
  child->global_ranks_in_group.clear();
  if (!options_->global_ranks_in_group.empty()) {
    for (int r : ranks) {
      child->global_ranks_in_group.push_back(globalRank(r));
    }
  }
  GilRelease noGil;
  return c10::make_intrusive<GoncclBackend>(
      store,
      static_cast<int>(it - ranks.begin()),
      static_cast<int>(ranks.size()),
      child,
      libraryPath_);
}

void GoncclBackend::shutdown() {
  close(/*abort=*/false);
}

void GoncclBackend::abort() {
  close(/*abort=*/true);
}

void GoncclBackend::close(bool abort) {
  // A thread issuing on a full queue holds issueMutex_ until Go makes room:
  // wait for it without the GIL.
  GilRelease noGil;
  goncclComm_t comm = nullptr;
  std::shared_ptr<CompletionQueue> queue;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    if (closed_) {
      return;
    }
    closed_ = true;
    comm = std::exchange(comm_, nullptr);
    queue = std::move(queue_);
  }
  if (isForkedChild()) {
    // Neither the Go runtime nor the completion thread exists in a forked
    // child: touching either would hang. Leak both on purpose.
    new std::shared_ptr<CompletionQueue>(std::move(queue));
    return;
  }
  const Library& L = lib();
  // No new op can start now (closed_). Pending ops would keep a graceful
  // destroy waiting until their deadline; fail them instead.
  const bool failPending = abort || queue->pending() > 0;
  goncclResult_t rc =
      comm == nullptr  // never configured (enable_reconfigure)
          ? goncclSuccess
          : failPending ? L.commAbort(comm) : L.commDestroy(comm);
  if (rc != goncclSuccess) {
    TORCH_WARN(
        "gonccl: ",
        failPending ? "goncclCommAbort" : "goncclCommDestroy",
        " failed: ",
        errorString(rc, nullptr));
  }
  if (!queue->drain(kDrainTimeout)) {
    TORCH_WARN(
        "gonccl: ",
        queue->pending(),
        " operation(s) were not reported finished within ",
        kDrainTimeout.count(),
        " s of closing the communicator; their Works will never complete");
  }
  queue->stop();
}

}  // namespace gonccl
