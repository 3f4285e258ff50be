// work.hpp: GoncclWork, the c10d::Work of one gonccl collective.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include "gonccl.h"

namespace gonccl {

// One collective in flight. Created by GoncclBackend when it issues the op,
// completed on the backend's completion thread (see completion.hpp), never on
// a Go thread. An op may consist of several gonccl requests (a coalesced op,
// an all_gather of uneven sizes, a batch of sends and receives): the Work
// completes when the last of them has.
//
// Completion order: the post-completion step (copy-out) runs first, then the
// future is completed (markCompleted or setError), then the Work itself
// (finish: ends the profiler range and wakes wait()).
// isCompleted / isSuccess / exception are the base class's, which read the
// state finish() sets.
//
// A Work on CUDA tensors has the gonccl stream its op ran on (cuda.hpp). Its
// copy-out and future completion are queued on that stream, behind the op's
// host->device copies, and then an event is recorded there; its future
// carries the device (so then() callbacks and Future.wait() are ordered after
// the op). wait() and synchronize() block the CPU until the host part is done,
// then make the caller's current stream (the default stream included) wait on
// that event. An op with a copy-out holds the communicator's next op back
// (goncclRequestHoldStream) until the copy-out is queued: complete() releases
// its requests, which the Work keeps until destroyed.
class GoncclWork : public c10d::Work {
 public:
  // profilingTitle must be a string literal (the profiler keeps the pointer).
  // opName names the op in error messages ("all_reduce").
  // inputs are shown in the profiler; outputs are the future's value and
  // result(). keepAlive holds any other tensor the op touches (staging).
  // stream is the gonccl stream of an op on CUDA tensors, or empty.
  GoncclWork(
      int rank,
      c10d::OpType opType,
      const char* profilingTitle,
      const char* opName,
      uint64_t seq,
      std::vector<at::Tensor> inputs,
      std::vector<at::Tensor> outputs,
      std::vector<at::Tensor> keepAlive = {},
      std::function<void()> postComplete = nullptr,
      std::optional<c10::Stream> stream = std::nullopt);
  ~GoncclWork() override;

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  // wait() without a deadline of its own: for a CUDA op that is the CPU
  // waiting for the host part, then the current stream for the device part.
  void synchronize() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  uint64_t getSequencenumber() const override;
  // The rank a receive from any source matched; throws for other Works.
  int sourceRank() const override;

  const char* opName() const {
    return opName_;
  }

  // The gonccl stream of an op on CUDA tensors (empty for CPU ops).
  const std::optional<c10::Stream>& stream() const {
    return stream_;
  }

  // A CUDA op keeps its finished requests (freed with the Work) for wait():
  // the completion thread hands each one over before reporting its part done.
  // Thread-safe. Never throws.
  void adoptRequest(goncclRequest_t request);

  // A member of a coalesced group: the group's wait() makes the current
  // stream wait on it too. Call before the group can complete.
  void addMember(c10::intrusive_ptr<GoncclWork> member);

  // The Work completes after n more calls of partDone. issueError, if not
  // empty, is the error the Work will end with whatever the parts report (the
  // op failed to issue after some of its parts had started). Call once,
  // before any part can finish.
  void expectParts(size_t n, std::string issueError = {});

  // One part finished (error empty on success); the last one completes the
  // Work with the first error seen. Thread-safe. Never throws.
  void partDone(const std::string& error);

  // For receives from any source: the completion thread records the sender.
  void recordSourceRank() {
    recordsSource_ = true;
  }
  bool recordsSource() const {
    return recordsSource_;
  }
  void setSourceRank(int rank) {
    sourceRank_.store(rank);
  }

  // Runs the copy-out, completes the future and the Work. error is empty on
  // success. Called once. Never throws.
  void complete(const std::string& error);

  // Fails the Work at once (the op could not be issued). Never throws.
  void fail(const std::string& error);

 private:
  // Makes the current stream of the op's device wait on the op's completion
  // event (members' first). The host part must be done.
  void waitStreams();

  // Releases the holds of the op's requests (goncclRequestReleaseStream).
  void releaseHolds();
  // Ends the op's profiler range (opened by c10d::Work) before the future
  // completes.
  void endProfilingRange();

  std::mutex partsMutex_;
  size_t partsLeft_ = 0;
  std::string partsError_;
  bool recordsSource_ = false;
  std::atomic<int> sourceRank_{-1};

  const char* opName_;
  const uint64_t seq_;
  std::vector<at::Tensor> inputs_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keepAlive_;
  std::function<void()> postComplete_;
  const std::optional<c10::Stream> stream_;
  std::vector<goncclRequest_t> requests_;  // partsMutex_; CUDA ops only
  // Recorded on stream_ by complete() after the copy-out (CUDA ops that
  // succeeded); read by wait() once the Work has completed.
  std::optional<c10::Event> done_;
  std::vector<c10::intrusive_ptr<GoncclWork>> members_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace gonccl
