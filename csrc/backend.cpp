#include "backend.hpp"

#include <Python.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <iterator>
#include <map>
#include <mutex>
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

// Appended to error messages of a group whose ranks are not the global ones:
// which global ranks they are (empty otherwise).
std::string groupNote(const GoncclOptions& options, int size) {
  const std::vector<uint64_t>& global = options.global_ranks_in_group;
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
  if (identity) {
    return "";
  }
  return c10::str(
      " (in group '",
      options.group_name,
      "', whose ranks 0..",
      size - 1,
      " are global ranks ",
      c10::Join(", ", global),
      ")");
}

// torch 2.11-2.13's ProcessGroup::splitGroup asks the parent's backend to
// split once per device type the group serves (cpu and cuda: one gonccl
// backend), with the same store both times. The second call must return the
// child the first made: another communicator on the same store keys would
// never form. Keyed by (parent, store); the store lives as long as the child.
struct SplitChildren {
  std::mutex mutex;
  std::map<
      std::pair<const void*, const void*>,
      c10::weak_intrusive_ptr<c10d::Backend>>
      byParentAndStore;
};

// Never destroyed: backends may outlive static destruction at exit.
SplitChildren& splitChildren() {
  static auto* children = new SplitChildren();
  return *children;
}

}  // namespace

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
  rankNote_ = groupNote(*options_, size);
  // Go checks that every rank has the same (when they join).
  const bool knobs = !options_->algorithm.empty() || options_->chunk_size != 0;
  const Library& L = loadLibrary(libraryPath);
  hops::configure();
  const goncclUniqueId id = shareUniqueId(*store, kUniqueIdKey, rank, size, "");

  goncclResult_t rc;
  if (!knobs && epoch == 0) {
    rc = L.commInitRankTimeout(&comm_, size, id, rank, timeout_.count());
  } else if (!knobs) {
    rc = L.commInitRankEpoch(&comm_, size, id, rank, timeout_.count(), epoch);
  } else {
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
    // The library's own message names the rank and the step already.
    if (detail.rfind("gonccl rank ", 0) == 0) {
      C10_THROW_ERROR(DistBackendError, c10::str(detail, rankNote_));
    }
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl rank ",
            rank,
            " of ",
            size,
            rankNote_,
            ": communicator init failed: ",
            detail));
  }
  queue_ = CompletionQueue::create();
  init();
}

// kIdFailed leads what rank 0 stores instead of the unique id when it could not
// make one (a bad setting, no usable interface), followed by why: the other
// ranks, waiting for the id, fail at once with rank 0's reason instead of at
// the store's timeout. kIdFailedWait bounds how long rank 0 waits for them to
// read it (the store may live in rank 0's process, and go with it).
static const std::string kIdFailed = "gonccl: no unique id: ";
static constexpr std::chrono::milliseconds kIdFailedWait{3000};

goncclUniqueId GoncclBackend::shareUniqueId(
    c10d::Store& store,
    const std::string& key,
    int rank,
    int size,
    const char* what) {
  const Library& L = lib();
  goncclUniqueId id;
  if (rank == 0) {
    goncclResult_t rc = L.getUniqueId(&id);
    if (rc != goncclSuccess) {
      const std::string why = errorString(rc, L.getLastError(nullptr));
      const std::string note = kIdFailed + why;
      store.set(key, std::vector<uint8_t>(note.begin(), note.end()));
      const auto until = std::chrono::steady_clock::now() + kIdFailedWait;
      while (store.add(key + "/read", 0) < size - 1 &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      C10_THROW_ERROR(DistBackendError, c10::str("gonccl rank 0: ", what, why));
    }
    const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal);
    store.set(key, std::vector<uint8_t>(bytes, bytes + sizeof(id.internal)));
  } else {
    std::vector<uint8_t> bytes = store.get(key);
    const std::string text(bytes.begin(), bytes.end());
    if (text.rfind(kIdFailed, 0) == 0) {
      store.add(key + "/read", 1);
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(
              "gonccl rank ",
              rank,
              ": ",
              what,
              "rank 0 could not start the group: ",
              text.substr(kIdFailed.size())));
    }
    TORCH_CHECK(
        bytes.size() == sizeof(id.internal),
        "gonccl: ",
        what,
        "the unique id in the store has ",
        bytes.size(),
        " bytes, expected ",
        sizeof(id.internal));
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  return id;
}

int GoncclBackend::globalRank(int r) const {
  const std::vector<uint64_t>& global = options_->global_ranks_in_group;
  if (r >= 0 && static_cast<size_t>(r) < global.size()) {
    return static_cast<int>(global[r]);
  }
  return r;
}

GoncclBackend::~GoncclBackend() {
  {
    SplitChildren& children = splitChildren();
    std::lock_guard<std::mutex> guard(children.mutex);
    for (auto it = children.byParentAndStore.begin();
         it != children.byParentAndStore.end();) {
      it = it->first.first == this ? children.byParentAndStore.erase(it)
                                   : std::next(it);
    }
  }
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

void GoncclBackend::setTimeout(std::chrono::milliseconds timeout) {
  // 0, as with Gloo, makes later ops time out at once (goncclCommSetTimeout).
  TORCH_CHECK_VALUE(
      timeout.count() >= 0,
      "gonccl: set_timeout: the timeout must not be negative, got ",
      timeout.count(),
      " ms");
  std::lock_guard<std::mutex> guard(issueMutex_);
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
  const std::pair<const void*, const void*> key{this, store.get()};
  SplitChildren& children = splitChildren();
  {
    std::lock_guard<std::mutex> guard(children.mutex);
    auto found = children.byParentAndStore.find(key);
    if (found != children.byParentAndStore.end()) {
      if (auto child = found->second.lock()) {
        return child;
      }
      children.byParentAndStore.erase(found);
    }
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
  c10::intrusive_ptr<c10d::Backend> made;
  {
    GilRelease noGil;
    made = c10::make_intrusive<GoncclBackend>(
        store,
        static_cast<int>(it - ranks.begin()),
        static_cast<int>(ranks.size()),
        child,
        libraryPath_);
  }
  std::lock_guard<std::mutex> guard(children.mutex);
  children.byParentAndStore.insert_or_assign(
      key, c10::weak_intrusive_ptr<c10d::Backend>(made));
  return made;
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
  // Every copy-out is queued: the streams may serve another backend now.
  std::map<c10::DeviceIndex, c10::Stream> streams;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    streams.swap(streams_);
  }
  for (const auto& entry : streams) {
    cuda::releaseStream(entry.second);
  }
}

}  // namespace gonccl
