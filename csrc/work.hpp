// work.hpp: GoncclWork, the c10d::Work of one gonccl collective.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/ivalue.h>
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
class GoncclWork : public c10d::Work {
 public:
  // profilingTitle must be a string literal (the profiler keeps the pointer).
  // opName names the op in error messages ("all_reduce").
  // inputs are shown in the profiler; outputs are the future's value and
  // result(). keepAlive holds any other tensor the op touches (staging).
  GoncclWork(
      int rank,
      c10d::OpType opType,
      const char* profilingTitle,
      const char* opName,
      uint64_t seq,
      std::vector<at::Tensor> inputs,
      std::vector<at::Tensor> outputs,
      std::vector<at::Tensor> keepAlive = {},
      std::function<void()> postComplete = nullptr);
  ~GoncclWork() override;

  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  uint64_t getSequencenumber() const override;
  // The rank a receive from any source matched; throws for other Works.
  int sourceRank() const override;

  const char* opName() const {
    return opName_;
  }

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
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace gonccl
