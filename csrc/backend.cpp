#include "backend.hpp"

#include <Python.h>

#include <cstring>
#include <utility>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <ATen/core/grad_mode.h>

#include "checks.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

constexpr const char* kUniqueIdKey = "gonccl/unique_id";
// How long closing waits for Go to report the requests it has failed or
// finished before giving up on them.
constexpr auto kDrainTimeout = std::chrono::seconds(30);

// Releases the GIL for its scope if this thread holds it. Closing the
// communicator waits for the completion thread, which may need the GIL to run
// a Python callback attached to a future.
class GilRelease {
 public:
  GilRelease() {
    if (Py_IsInitialized() && PyGILState_Check()) {
      state_ = PyEval_SaveThread();
    }
  }
  ~GilRelease() {
    if (state_ != nullptr) {
      PyEval_RestoreThread(state_);
    }
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

[[noreturn]] void unsupported(const char* op) {
  C10_THROW_ERROR(
      DistBackendError, c10::str("gonccl: ", op, " is not supported yet"));
}

}  // namespace

GoncclBackend::GoncclBackend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    const std::string& libraryPath)
    : Backend(rank, size), timeout_(timeout) {
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
      L.commInitRankTimeout(&comm_, size, id, rank, timeout.count());
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
  return comm_;
}

template <typename Start>
c10::intrusive_ptr<c10d::Work> GoncclBackend::issue(
    c10d::OpType opType,
    const char* profilingTitle,
    const char* opName,
    std::vector<at::Tensor> inputs,
    std::vector<at::Tensor> outputs,
    std::vector<at::Tensor> keepAlive,
    std::function<void()> postComplete,
    Start start) {
  // One op at a time: the sequence number and the order Go sees must agree.
  std::lock_guard<std::mutex> guard(issueMutex_);
  goncclComm_t comm = liveComm(opName);
  auto work = c10::make_intrusive<GoncclWork>(
      rank_,
      opType,
      profilingTitle,
      opName,
      seq_ + 1,
      std::move(inputs),
      std::move(outputs),
      std::move(keepAlive),
      std::move(postComplete));
  goncclRequest_t request = nullptr;
  goncclResult_t rc = start(comm, &request);
  if (rc != goncclSuccess) {
    std::string msg = c10::str(
        "gonccl: ",
        opName,
        " failed: ",
        errorString(rc, lib().getLastError(comm)));
    work->fail(msg);
    C10_THROW_ERROR(DistBackendError, msg);
  }
  ++seq_;
  work->request = request;
  queue_->track(work);
  return work;
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  constexpr const char* op = "all_reduce";
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  goncclRedOp_t redOp = toRedOp(opts.reduceOp, op);
  void* buf = t.data_ptr();
  size_t count = t.numel();
  return issue(
      c10d::OpType::ALLREDUCE,
      "gonccl:all_reduce",
      op,
      {t},
      {t},
      {},
      nullptr,
      [&](goncclComm_t comm, goncclRequest_t* req) {
        return lib().allReduceAsync(
            buf, buf, count, type, redOp, comm, nullptr, req);
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  constexpr const char* op = "all_reduce_coalesced";
  if (tensors.empty()) {
    C10_THROW_ERROR(
        ValueError, c10::str("gonccl: ", op, ": expected at least 1 tensor"));
  }
  goncclDataType_t type = goncclFloat32;
  int64_t total = 0;
  for (const at::Tensor& t : tensors) {
    type = checkTensor(t, op);
    checkSameDtype(t, tensors[0], op, "every tensor");
    total += t.numel();
  }
  goncclRedOp_t redOp = toRedOp(opts.reduceOp, op);

  // One reduction over a flat copy of all the tensors, copied back after.
  at::Tensor flat;
  {
    at::NoGradGuard noGrad;
    flat = at::empty({total}, tensors[0].options());
    int64_t offset = 0;
    for (const at::Tensor& t : tensors) {
      flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
      offset += t.numel();
    }
  }
  std::vector<at::Tensor> outputs = tensors;
  auto copyOut = [flat, outputs]() {
    int64_t offset = 0;
    for (const at::Tensor& t : outputs) {
      t.view({-1}).copy_(flat.narrow(0, offset, t.numel()));
      offset += t.numel();
    }
  };
  void* buf = flat.data_ptr();
  size_t count = total;
  return issue(
      c10d::OpType::ALLREDUCE_COALESCED,
      "gonccl:all_reduce_coalesced",
      op,
      tensors,
      outputs,
      {flat},
      copyOut,
      [&](goncclComm_t comm, goncclRequest_t* req) {
        return lib().allReduceAsync(
            buf, buf, count, type, redOp, comm, nullptr, req);
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  constexpr const char* op = "broadcast";
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  if (opts.rootTensor != 0) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": root tensor must be 0 (one tensor per rank), got ",
            opts.rootTensor));
  }
  const int64_t root = opts.rootRank + opts.rootTensor;
  if (root < 0 || root >= size_) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": root rank ",
            root,
            " is out of range for a group of size ",
            size_));
  }
  void* buf = t.data_ptr();
  size_t count = t.numel();
  return issue(
      c10d::OpType::BROADCAST,
      "gonccl:broadcast",
      op,
      {t},
      {t},
      {},
      nullptr,
      [&](goncclComm_t comm, goncclRequest_t* req) {
        return lib().broadcastAsync(
            buf, buf, count, type, static_cast<int>(root), comm, nullptr, req);
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors,
    std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& /*opts*/) {
  constexpr const char* op = "all_gather";
  checkCount(inputTensors, 1, op, "input tensor");
  if (outputTensors.size() != 1) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": expected 1 list of output tensors, got ",
            outputTensors.size()));
  }
  at::Tensor input = inputTensors[0];
  std::vector<at::Tensor> outputs = outputTensors[0];
  goncclDataType_t type = checkTensor(input, op);
  checkCount(outputs, size_, op, "output tensor");
  const int64_t n = input.numel();
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor& out = outputs[i];
    checkTensor(out, op);
    checkSameDtype(out, input, op, "an output tensor");
    if (out.numel() != n) {
      C10_THROW_ERROR(
          ValueError,
          c10::str(
              "gonccl: ",
              op,
              ": output tensor ",
              i,
              " has ",
              out.numel(),
              " elements, expected ",
              n,
              " (the input's)"));
    }
  }
  // The outputs may already be consecutive pieces of one buffer: then Go
  // gathers straight into them.
  bool consecutive = true;
  const auto* base = static_cast<const char*>(outputs[0].data_ptr());
  const size_t pieceBytes = n * input.element_size();
  for (size_t i = 0; i < outputs.size(); ++i) {
    consecutive = consecutive &&
                  outputs[i].storage().is_alias_of(outputs[0].storage()) &&
                  static_cast<const char*>(outputs[i].data_ptr()) ==
                      base + i * pieceBytes;
  }

  at::Tensor flat;
  std::function<void()> copyOut;
  void* recv = nullptr;
  if (consecutive) {
    recv = outputs[0].data_ptr();
  } else {
    flat = at::empty({n * size_}, input.options());
    recv = flat.data_ptr();
    copyOut = [flat, outputs, n]() {
      for (size_t i = 0; i < outputs.size(); ++i) {
        outputs[i].copy_(flat.narrow(0, i * n, n).view(outputs[i].sizes()));
      }
    };
  }
  void* send = input.data_ptr();
  std::vector<at::Tensor> keepAlive;
  if (flat.defined()) {
    keepAlive.push_back(flat);
  }
  return issue(
      c10d::OpType::ALLGATHER,
      "gonccl:all_gather",
      op,
      {input},
      outputs,
      std::move(keepAlive),
      std::move(copyOut),
      [&](goncclComm_t comm, goncclRequest_t* req) {
        return lib().allGatherAsync(send, recv, n, type, comm, nullptr, req);
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::_allgather_base(
    at::Tensor& outputBuffer,
    at::Tensor& inputBuffer,
    const c10d::AllgatherOptions& /*opts*/) {
  constexpr const char* op = "all_gather_into_tensor";
  goncclDataType_t type = checkTensor(inputBuffer, op);
  checkTensor(outputBuffer, op);
  checkSameDtype(outputBuffer, inputBuffer, op, "the output tensor");
  const int64_t n = inputBuffer.numel();
  if (outputBuffer.numel() != n * size_) {
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": output tensor must have world_size * input elements (got ",
            outputBuffer.numel(),
            ", expected ",
            size_,
            " * ",
            n,
            " = ",
            n * size_,
            ")"));
  }
  void* send = inputBuffer.data_ptr();
  void* recv = outputBuffer.data_ptr();
  return issue(
      c10d::OpType::_ALLGATHER_BASE,
      "gonccl:all_gather_into_tensor",
      op,
      {inputBuffer},
      {outputBuffer},
      {},
      nullptr,
      [&](goncclComm_t comm, goncclRequest_t* req) {
        return lib().allGatherAsync(send, recv, n, type, comm, nullptr, req);
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::barrier(
    const c10d::BarrierOptions& /*opts*/) {
  return issue(
      c10d::OpType::BARRIER,
      "gonccl:barrier",
      "barrier",
      {},
      {},
      {},
      nullptr,
      [&](goncclComm_t comm, goncclRequest_t* req) {
        return lib().barrierAsync(comm, nullptr, req);
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allreduce_sparse(
    std::vector<at::Tensor>&, const c10d::AllreduceOptions&) {
  unsupported("all_reduce of sparse tensors");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce(
    std::vector<at::Tensor>&, const c10d::ReduceOptions&) {
  unsupported("reduce");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>&,
    std::vector<at::Tensor>&,
    const c10d::AllgatherOptions&) {
  unsupported("all_gather_coalesced");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>&,
    std::vector<at::Tensor>&,
    const c10d::AllgatherOptions&) {
  unsupported("all_gather_into_tensor_coalesced");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::gather(
    std::vector<std::vector<at::Tensor>>&,
    std::vector<at::Tensor>&,
    const c10d::GatherOptions&) {
  unsupported("gather");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::gather_into_tensor(
    at::Tensor&, at::Tensor&, const c10d::GatherOptions&) {
  unsupported("gather_into_tensor");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::scatter(
    std::vector<at::Tensor>&,
    std::vector<std::vector<at::Tensor>>&,
    const c10d::ScatterOptions&) {
  unsupported("scatter");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce_scatter(
    std::vector<at::Tensor>&,
    std::vector<std::vector<at::Tensor>>&,
    const c10d::ReduceScatterOptions&) {
  unsupported("reduce_scatter");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::_reduce_scatter_base(
    at::Tensor&, at::Tensor&, const c10d::ReduceScatterOptions&) {
  unsupported("reduce_scatter_tensor");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>&,
    std::vector<at::Tensor>&,
    const c10d::ReduceScatterOptions&) {
  unsupported("reduce_scatter_tensor_coalesced");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::alltoall_base(
    at::Tensor&,
    at::Tensor&,
    std::vector<int64_t>&,
    std::vector<int64_t>&,
    const c10d::AllToAllOptions&) {
  unsupported("all_to_all_single");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::alltoall(
    std::vector<at::Tensor>&,
    std::vector<at::Tensor>&,
    const c10d::AllToAllOptions&) {
  unsupported("all_to_all");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::send(
    std::vector<at::Tensor>&, int, int) {
  unsupported("send");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::recv(
    std::vector<at::Tensor>&, int, int) {
  unsupported("recv");
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::recvAnysource(
    std::vector<at::Tensor>&, int) {
  unsupported("recv from any source");
}

void GoncclBackend::monitoredBarrier(const c10d::BarrierOptions&, bool) {
  unsupported("monitored_barrier");
}

void GoncclBackend::shutdown() {
  close(/*abort=*/false);
}

void GoncclBackend::abort() {
  close(/*abort=*/true);
}

void GoncclBackend::close(bool abort) {
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
  GilRelease noGil;
  const Library& L = lib();
  // No new op can start now (closed_). Pending ops would keep a graceful
  // destroy waiting until their deadline; fail them instead.
  const bool failPending = abort || queue->pending() > 0;
  goncclResult_t rc = failPending ? L.commAbort(comm) : L.commDestroy(comm);
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
