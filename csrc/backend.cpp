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
#include "gil.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

constexpr const char* kUniqueIdKey = "gonccl/unique_id";
// How long closing waits for Go to report the requests it has failed or
// finished before giving up on them.
constexpr auto kDrainTimeout = std::chrono::seconds(30);

}  // namespace

GoncclBackend::GoncclBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    const std::string& libraryPath,
    uint32_t epoch)
    : Backend(rank, size),
      libraryPath_(libraryPath),
      timeout_(timeout),
      store_(store),
      epoch_(epoch) {
  TORCH_CHECK_VALUE(
      size >= 1 && rank >= 0 && rank < size,
      "gonccl: invalid rank ",
      rank,
      " for a group of size ",
      size);
  const Library& L = loadLibrary(libraryPath);

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

  goncclResult_t rc =
      epoch == 0
          ? L.commInitRankTimeout(&comm_, size, id, rank, timeout.count())
          : need(L.commInitRankEpoch, "goncclCommInitRankEpoch", "shrink")(
                &comm_, size, id, rank, timeout.count(), epoch);
  if (rc != goncclSuccess) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl: communicator init failed on rank ",
            rank,
            " of ",
            size,
            ": ",
            errorString(rc, L.getLastError(comm_))));
  }
  queue_ = CompletionQueue::create();
  init();
}

GoncclBackend::~GoncclBackend() {
  try {
    close(/*abort=*/false);
  } catch (const std::exception& e) {
    TORCH_WARN("gonccl: closing the communicator failed: ", e.what());
  }
}

c10::intrusive_ptr<c10d::Backend::Options> GoncclBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("gonccl", timeout_);
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
    error = c10::str(
        "gonccl: ",
        op.name,
        " failed: ",
        errorString(rc, lib().getLastError(parts.comm)));
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
    for (goncclRequest_t request : parts.requests) {
      queue_->track(work, request);
    }
    if (!error.empty()) {
      C10_THROW_ERROR(DistBackendError, error);
    }
  }
  if (coalescing_) {
    coalesced_.push_back(work);
  }
  return work;
}

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
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  TORCH_CHECK_VALUE(
      it != ranks.end(),
      "gonccl: split: rank ",
      rank_,
      " is not one of the new group's ranks ",
      ranks);
  liveComm("split");
  const auto timeout = opts ? opts->timeout : timeout_;
  GilRelease noGil;
  return c10::make_intrusive<GoncclBackend>(
      store,
      static_cast<int>(it - ranks.begin()),
      static_cast<int>(ranks.size()),
      std::chrono::duration_cast<std::chrono::milliseconds>(timeout),
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
