// backend.hpp: GoncclBackend, the c10d::Backend that runs collectives in Go.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "completion.hpp"
#include "gonccl.h"

namespace gonccl {

class GoncclBackend : public c10d::Backend {
 public:
  // Loads libgonccl.so from libraryPath (first backend only), shares a unique
  // id through store (rank 0 sets it, the others get it) and joins the
  // communicator. Blocks until every rank has joined or timeout has passed:
  // call it without the GIL.
  GoncclBackend(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      std::chrono::milliseconds timeout,
      const std::string& libraryPath);
  ~GoncclBackend() override;

  const std::string getBackendName() const override {
    return "gonccl";
  }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  uint64_t getSequenceNumberForGroup() override;

  // Supported collectives (CPU tensors).
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;

  // Not supported yet: each raises DistBackendError. Where c10d has a
  // canonical name and a deprecated alias that forward to each other, the
  // alias is overridden, so both names reach it.
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors, int tag) override;
  void monitoredBarrier(
      const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // Waits for nothing: fails pending ops (goncclCommAbort) if any, else frees
  // the communicator (goncclCommDestroy). Then joins the completion thread.
  void shutdown() override;
  // Fails every pending op at once (goncclCommAbort) and joins the thread.
  void abort() override;

 private:
  // Throws if the backend is shut down or this process is a fork; returns the
  // communicator.
  goncclComm_t liveComm(const char* op);

  // Issues one op under issueMutex_: builds the Work, calls `start` (which
  // calls a goncclXAsync function and returns its result), hands the request
  // to the completion queue.
  template <typename Start>
  c10::intrusive_ptr<c10d::Work> issue(
      c10d::OpType opType,
      const char* profilingTitle,
      const char* opName,
      std::vector<at::Tensor> inputs,
      std::vector<at::Tensor> outputs,
      std::vector<at::Tensor> keepAlive,
      std::function<void()> postComplete,
      Start start);

  void close(bool abort);

  std::chrono::milliseconds timeout_;
  std::mutex issueMutex_;
  goncclComm_t comm_ = nullptr;
  uint64_t seq_ = 0;
  bool closed_ = false;
  std::shared_ptr<CompletionQueue> queue_;
};

}  // namespace gonccl
