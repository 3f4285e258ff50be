// backend.hpp: GoncclBackend, the c10d::Backend that runs collectives in Go.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <c10/core/Stream.h>
#include <c10/util/FunctionRef.h>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/version.h>

#include "completion.hpp"
#include "errors.hpp"
#include "gonccl.h"
#include "state.hpp"
#include "torch_compat.hpp"

namespace gonccl {

// gonccl's process-group options (Python: gonccl.GoncclOptions), given as
// pg_options to init_process_group / new_group / split_group. Besides torch's
// (timeout, group_name, global_ranks_in_group), the communicator's own knobs;
// empty/zero keeps the environment's (GONCCL_ALGO, GONCCL_CHUNKSIZE). Every
// rank of a group must give the same knobs (checked when it is created).
struct GoncclOptions : c10d::Backend::Options {
  explicit GoncclOptions(
      std::chrono::milliseconds timeout = ::kBackendDefaultTimeout)
      : Options("gonccl", timeout) {}
  GoncclOptions(const GoncclOptions&) = default;

  // The algorithms the cost model may pick, in GONCCL_ALGO's syntax
  // ("allreduce:ring;broadcast:chain", "^direct").
  std::string algorithm;
  // Bytes per pipelined chunk of the ring and chain algorithms (4096..1 GiB).
  int64_t chunk_size = 0;

#if GONCCL_TORCH_AT_LEAST(2, 14)
  c10::intrusive_ptr<c10d::Backend::Options> clone() const override {
    return c10::make_intrusive<GoncclOptions>(*this);
  }
#endif
};

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
      const std::string& libraryPath,
      uint32_t epoch = 0);
  // A backend with no communicator yet, for a group created with
  // enable_reconfigure: its first reconfigure() makes one (reconfigure.cpp).
  // The options' algorithm and chunk size do not apply to communicators that
  // reconfigure makes.
  struct Deferred {};
  GoncclBackend(
      Deferred,
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      c10::intrusive_ptr<GoncclOptions> options,
      const std::string& libraryPath);
  // The same with options (its timeout is the group's).
  GoncclBackend(
      const c10::intrusive_ptr<c10d::Store>& store,
      int rank,
      int size,
      c10::intrusive_ptr<GoncclOptions> options,
      const std::string& libraryPath,
      uint32_t epoch = 0);
  ~GoncclBackend() override;

  const std::string getBackendName() const override {
    return "gonccl";
  }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  uint64_t getSequenceNumberForGroup() override;

  bool supportsCoalescing() const override {
    return true;
  }
  bool supportsSplitting() const override {
    return true;
  }

  // Ops issued between startCoalescing and endCoalescing (a
  // batch_isend_irecv, a _coalescing_manager block) start at once, as usual;
  // endCoalescing returns one Work that completes when all of them have.
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // A new backend for the members of ranks (ranks of this group, in the new
  // group's order), joined over store (already prefixed for the new group).
  // On a rank that is not one of them: none (nullptr, what torch's
  // splitGroup expects of a rank left out), and nothing is joined.
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<Options>& opts) override;

  // Collectives, on CPU tensors or (in a build with CUDA support) on CUDA
  // tensors of one device; see cuda.hpp for the CUDA path. Where c10d has a
  // canonical name and a deprecated alias that forward to each other, the
  // alias is overridden, so both names reach it. Defined in collectives.cpp.
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
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
#if GONCCL_HAS_GATHER_INTO_TENSOR
  c10::intrusive_ptr<c10d::Work> gather_into_tensor(
      at::Tensor& outputBuffer,
      at::Tensor& inputBuffer,
      const c10d::GatherOptions& opts) override;
#endif
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
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;

  // Point to point and the monitored barrier built on it (p2p.cpp).
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors, int tag) override;
  // Like Gloo's: every rank reports to rank 0, which names the ranks that
  // did not arrive within the timeout (all of them if waitAllRanks, else the
  // first), then releases the others.
  void monitoredBarrier(
      const c10d::BarrierOptions& opts, bool waitAllRanks) override;

  // Timeouts (backend.cpp). An op's time limit is the group's (setTimeout, or
  // the one it was created with), or the per-call one in its options
  // (barrier(timeout=...)), plus any ephemeral extensions in force when it is
  // issued. An extension lasts until the first op issued after it finishes.
  void setTimeout(std::chrono::milliseconds timeout) override;
#if GONCCL_TORCH_AT_LEAST(2, 15)
  void addEphemeralTimeout(const std::chrono::milliseconds& timeout) override;
#endif

  // The kind of the first failure that broke the communicator.
  c10d::ErrorType getError() override;
  // Works issued from now on measure their duration (Work.getDuration).
  void enableCollectivesTiming() override;
  // Called with every finished Work's op type, sequence number and times, on
  // the completion thread.
  void registerOnCompletionHook(
      std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
  // Waits (up to the group's timeout) until every op issued so far finished.
  void waitForPendingWorks() override;

#if GONCCL_HAS_HOOKS
  // torch's completion and abort hooks (Hooks.hpp), which its flight recorder
  // attaches through: completion hooks run when an op succeeds (with its
  // duration when timing is on, after the Work completed), abort hooks when
  // an op fails in a way that breaks the communicator (timeout, lost peer,
  // mismatch), before the Work reports the failure to anyone.
  bool supportsCompletionHooks() const override {
    return true;
  }
  void registerCompletionHook(int64_t id, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t id) override;
  bool supportsAbortHooks() const override {
    return true;
  }
  void registerAbortHook(int64_t id, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t id) override;
#endif

  // Fault tolerance (shrink.cpp). shrink makes a new communicator of this
  // group's ranks less ranks_to_exclude, renumbered in order, one generation
  // (epoch) later, over this group's store under a prefix of its own; the
  // excluded ranks (dead or not) take no part. With SHRINK_ABORT this group is
  // aborted first. It works whether or not this group has failed.
#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)
  bool supportsShrinking() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranks_to_exclude,
      int shrink_flags,
      const c10::intrusive_ptr<Options>& opts_override) override;
#endif
#ifdef C10D_BACKEND_HAS_RECONFIGURE
  bool supportsReconfigure() const override {
    return true;
  }
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  c10::intrusive_ptr<c10d::Work> reconfigure(
      const c10d::ReconfigureOptions& opts) override;
#endif
  // This process's handle for reconfigure: "gonccl:<host>:<pid>:<nonce>".
#if GONCCL_HAS_WINDOW
  // One-sided windows on CPU tensors (window.cpp).
  bool supportsWindow() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Window> new_window(
      const std::optional<at::Tensor>& tensor) override;
#endif
  const std::string& handle() const;
  // This communicator's generation.
  uint32_t epoch() const {
    return epoch_;
  }
  // How many frames of older generations this communicator has dropped (0
  // with no communicator).
  uint64_t staleFrames();

  // The time estimator (estimate.cpp). Between beginEstimate and
  // finishEstimate the ops this backend issues are recorded, not run: each
  // adds the cost model's time for it (goncclCommEstimate) and returns a Work
  // that is already complete, its tensors untouched; finishEstimate returns
  // the total in microseconds. torch 2.15's dist._time_estimator reaches them
  // through startTimeEstimate / endTimeEstimate.
  bool supportsTimeEstimation() const override {
    return GONCCL_HAS_TIME_ESTIMATE;
  }
#if GONCCL_HAS_TIME_ESTIMATE
  void startTimeEstimate() override {
    beginEstimate();
  }
  float endTimeEstimate() override {
    return static_cast<float>(finishEstimate());
  }
#endif
  void beginEstimate();
  double finishEstimate();

  // Suspend and resume (suspend.cpp): suspend waits for the ops issued so
  // far, then frees the communicator's memory (host scratch, shared-memory
  // send rings, the pinned staging pool, the device scratch; connections
  // stay); ops issued while suspended fail with a DistBackendError saying so.
  // memoryStats is what it holds, in bytes per kind. torch 2.12+ declares
  // them on c10d::Backend; gonccl's module binds them on every torch.
  void suspendComm();
  void resumeComm();
  std::unordered_map<std::string, uint64_t> memoryStats();
#if GONCCL_HAS_SUSPEND
  void suspend() override {
    suspendComm();
  }
  void resume() override {
    resumeComm();
  }
  std::unordered_map<std::string, uint64_t> getMemoryStats() override {
    return memoryStats();
  }
#endif
  // Connects to every peer now, instead of on first use (suspend.cpp).
  void eagerConnectSingleDevice(at::Device device) override;
  // How many peers this rank has a connection to.
  int connectedPeers();

  // ProcessGroup.merge_remote_group (suspend.cpp): a new backend of size
  // ranks over store (rank given by torch, in arrival order), with this
  // one's knobs and opts' timeout and name.
  c10::intrusive_ptr<c10d::Backend> merge(
      const c10::intrusive_ptr<c10d::Store>& store,
      const c10::intrusive_ptr<Options>& opts,
      const int& rank,
      const int& size) override;

  // Backend-allocated CPU tensors (alloc.cpp): allocate_tensor returns a
  // tensor in gonccl's shared memory (goncclMemAlloc).
  bool supportsTensorAlloc(c10::DeviceIndex deviceIdx) override;
  std::shared_ptr<c10::Allocator> getMemAllocator() override;
  at::Tensor allocateTensor(long size, at::TensorOptions options = {}) override;

  // Waits for nothing: fails pending ops (goncclCommAbort) if any, else frees
  // the communicator (goncclCommDestroy). Then joins the completion thread.
  void shutdown() override;
  // Fails every pending op at once (goncclCommAbort) and joins the thread.
  void abort() override;

  // The requests one op starts: a start function calls
  //   parts.start(lib().xAsync, args...)
  // (or parts.add(lib().xAsync(args..., parts.comm, parts.stream,
  // parts.next()))) for each, and returns the first failure (or
  // goncclSuccess).
  struct Parts {
    goncclComm_t comm = nullptr;
    // The gonccl stream of a CUDA op (buffers are device pointers), else null
    // (host buffers).
    goncclStream_t stream = nullptr;
    std::vector<goncclRequest_t> requests;
    goncclRequest_t* next() {
      pending_ = nullptr;
      return &pending_;
    }
    goncclResult_t add(goncclResult_t rc) {
      if (rc == goncclSuccess) {
        requests.push_back(pending_);
      }
      pending_ = nullptr;
      return rc;
    }
    // fn(args..., comm, stream, &request), added.
    template <typename Fn, typename... Args>
    goncclResult_t start(Fn fn, const Args&... args) {
      return add(fn(args..., comm, stream, next()));
    }
    // one(i) for i in [0, n), up to the first failure.
    template <typename One>
    goncclResult_t each(int64_t n, const One& one) {
      for (int64_t i = 0; i < n; ++i) {
        goncclResult_t rc = one(i);
        if (rc != goncclSuccess) {
          return rc;
        }
      }
      return goncclSuccess;
    }

   private:
    goncclRequest_t pending_ = nullptr;
  };
  // Called once, inside issue(): nothing is kept.
  using Start = c10::function_ref<goncclResult_t(Parts&)>;

  // What issue() needs besides the start function.
  struct Op {
    c10d::OpType type;
    OpName name;  // GONCCL_OP("all_reduce"): messages and profiling title
    std::vector<at::Tensor> inputs;
    std::vector<at::Tensor> outputs;               // the future's value
    std::vector<at::Tensor> keepAlive = {};        // staging buffers
    std::function<void()> postComplete = nullptr;  // copy-out
    bool anySource = false;                        // a receive from any source
  };

  // The per-call time limit (an options' timeout, kUnsetTimeout for the
  // group's) of the ops this thread issues while it is in scope.
  class CallTimeout {
   public:
    explicit CallTimeout(std::chrono::milliseconds timeout);
    ~CallTimeout();
    CallTimeout(const CallTimeout&) = delete;
    CallTimeout& operator=(const CallTimeout&) = delete;

   private:
    std::chrono::milliseconds previous_;
  };

  // Declared first in every collective, before its checks: should the
  // collective throw before issue() has handed any of it to Go, this rank
  // refuses the call on the way out (goncclCommRefuse). Its peers, which made
  // the call, then fail at once, naming this rank and the message of the
  // exception (lastFailure), instead of waiting for it until their timeout or
  // its exit. A collective that calls another leaves it to the outermost.
  class Checking {
   public:
    Checking(GoncclBackend& backend, goncclOpKind_t kind);
    ~Checking();
    Checking(const Checking&) = delete;
    Checking& operator=(const Checking&) = delete;
    // The collective this thread is in has been handed to Go (issue()).
    static void issued();

   private:
    GoncclBackend& backend_;
    goncclOpKind_t kind_;
    int uncaught_;
    Checking* outer_;
  };

  // Issues one op under issueMutex_: checks that its tensors share one device,
  // builds the Work, runs start, hands each request to the completion queue.
  // For CUDA tensors, start runs with parts.stream set to the device's gonccl
  // stream, which first waits on the caller's current stream (so the op sees
  // the staging done before issue() and all earlier work queued there). An op
  // that starts no request (nothing to move) completes at once. If start
  // fails, throws DistBackendError; the parts it had started still finish
  // before their buffers are released.
  c10::intrusive_ptr<GoncclWork> issue(Op op, Start start);
  // issue() of an op that starts one request: fn(args..., comm, stream, &req).
  template <typename Fn, typename... Args>
  c10::intrusive_ptr<GoncclWork> issueCall(Op op, Fn fn, const Args&... args) {
    return issue(std::move(op), [&](Parts& p) { return p.start(fn, args...); });
  }

 private:
  // Shares a communicator's unique id through store under key: rank 0 makes
  // and sets it, the others get it. what prefixes error messages ("" or
  // "reconfigure: "). If rank 0 cannot make the id, it stores why instead and
  // waits (briefly) for the other size-1 ranks to read it, so that every rank
  // fails at once with rank 0's reason. Only after loadLibrary.
  static goncclUniqueId shareUniqueId(
      c10d::Store& store,
      const std::string& key,
      int rank,
      int size,
      const char* what);

  // Throws if the backend is shut down or this process is a fork; returns the
  // communicator.
  goncclComm_t liveComm(const char* op);

  // Tells the peers that this rank will not make its next collective, of
  // kind, and why (goncclCommRefuse), unless the backend is shut down, has
  // no communicator, is estimating or this process is a fork. Never throws.
  void refuse(goncclOpKind_t kind, const std::string& reason) noexcept;

  void close(bool abort);

  // For an op on CUDA tensors: the device's gonccl stream, made to wait for
  // the caller's current stream and recorded on every tensor of the op, and
  // set in parts.stream. None for an op on CPU tensors. issueMutex_ held.
  std::optional<c10::Stream> opStream(const Op& op, Parts& parts);

  // The gonccl stream of a CUDA device (created on first use); issueMutex_
  // must be held.
  c10::Stream deviceStream(c10::DeviceIndex device);

  // Gives the communicator the timeout of the ops enqueued from now on, if it
  // has another (issueMutex_ held).
  void setCommTimeout(
      goncclComm_t comm, std::chrono::milliseconds timeout, const char* op);

  // The time limit of the op being issued (issueMutex_ held): the per-call
  // one if set, else the group's, plus the ephemeral extensions in force.
  std::chrono::milliseconds opTimeout(
      std::chrono::milliseconds requested,
      const c10::intrusive_ptr<GoncclWork>& work);

  // The global rank of a rank of this group when torch told it (else r).
  int globalRank(int r) const;
  // Appended to error messages: which global ranks this group's are.
  const std::string& rankNote() const {
    return rankNote_;
  }

  // An op issued while estimating: its estimate added, a completed Work
  // returned (estimate.cpp; issueMutex_ held).
  c10::intrusive_ptr<GoncclWork> recordEstimate(Op& op, goncclComm_t comm);
  // The last merge (torch calls merge once per device type of the group,
  // with one store): the same store gets the same merged backend.
  const c10d::Store* mergedStore_ = nullptr;  // issueMutex_
  c10::weak_intrusive_ptr<c10d::Backend> merged_{
      c10::intrusive_ptr<c10d::Backend>()};  // issueMutex_
  bool estimating_ = false;                  // issueMutex_
  double estimatedUs_ = 0;                   // issueMutex_

  std::string libraryPath_;
  c10::intrusive_ptr<GoncclOptions> options_;  // timeout: see timeout_
  std::string rankNote_;
  std::chrono::milliseconds timeout_;  // issueMutex_
  // The timeout the communicator gives ops enqueued now (issueMutex_).
  std::chrono::milliseconds commTimeout_;
  struct Extension {
    std::chrono::milliseconds amount;
    c10::intrusive_ptr<GoncclWork> firstWork;  // null until an op is issued
  };
  std::vector<Extension> extensions_;  // issueMutex_
  // monitoredBarrier's calls, numbered alike on every rank: each uses tags of
  // its own, so a late message of an earlier (failed) one cannot match.
  uint32_t monitoredBarriers_ = 0;
  std::shared_ptr<BackendState> state_ = std::make_shared<BackendState>();
  c10::intrusive_ptr<c10d::Store> store_;  // the group's: shrink uses it
  uint32_t epoch_ = 0;
  mutable std::once_flag handleOnce_;
  mutable std::string handle_;
  std::mutex issueMutex_;
  goncclComm_t comm_ = nullptr;
  uint64_t seq_ = 0;
  bool closed_ = false;
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<GoncclWork>> coalesced_;
  std::map<c10::DeviceIndex, c10::Stream> streams_;
  std::shared_ptr<CompletionQueue> queue_;
};

}  // namespace gonccl
