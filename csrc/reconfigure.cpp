// reconfigure.cpp: torch's reconfigure API (Backend::supportsReconfigure,
// get_reconfigure_handle, reconfigure) on gonccl: a running group swaps its
// communicator for one with another membership (survivors only, or with a
// replacement process), in place.
//
// A backend created with enable_reconfigure has no communicator until its first
// reconfigure. Each backend has a handle, a string naming this process and
// backend, which callers exchange out of band. reconfigure(uuid, handles) makes
// this rank the position of its own handle in handles (a set is sorted first),
// aborts the current communicator (its pending ops fail at once), and joins a
// new one over the group's store under the prefix gonccl/reconfigure/<uuid>/:
// every member publishes its epoch there and all take the largest plus one, so
// a newcomer (epoch 0) and survivors agree on a generation newer than any of
// theirs; the new rank 0 publishes the unique id.
#include "backend.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "gil.hpp"
#include "library.hpp"
#include "work.hpp"

namespace gonccl {
namespace {

std::string newHandle() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::random_device rd;
  const uint64_t nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char hex[17];
  std::snprintf(
      hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(nonce));
  return c10::str("gonccl:", host, ":", getpid(), ":", hex);
}

}  // namespace

GoncclBackend::GoncclBackend(
    Deferred /*tag*/,
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    c10::intrusive_ptr<GoncclOptions> options,
    const std::string& libraryPath)
    : Backend(rank, size),
      libraryPath_(libraryPath),
      options_(std::move(options)),
      timeout_(options_->timeout),
      commTimeout_(options_->timeout),
      store_(store) {
  TORCH_CHECK_VALUE(
      size >= 1 && rank >= 0 && rank < size,
      "gonccl: invalid rank ",
      rank,
      " for a group of size ",
      size);
  loadLibrary(libraryPath);
  queue_ = CompletionQueue::create();
  init();
}

const std::string& GoncclBackend::handle() const {
  std::call_once(handleOnce_, [this] { handle_ = newHandle(); });
  return handle_;
}

uint64_t GoncclBackend::staleFrames() {
  GilRelease noGil;
  std::lock_guard<std::mutex> guard(issueMutex_);
  uint64_t n = 0;
  if (comm_ != nullptr &&
      lib().commEpoch(comm_, nullptr, &n) != goncclSuccess) {
    n = 0;
  }
  return n;
}

#ifdef C10D_BACKEND_HAS_RECONFIGURE

namespace {

constexpr auto kReconfigureDrain = std::chrono::seconds(30);

std::vector<std::string> members(const c10d::ReconfigureOptions& opts) {
  if (const auto* list = std::get_if<std::vector<std::string>>(&opts.handles)) {
    return *list;
  }
  const auto& set = std::get<std::unordered_set<std::string>>(opts.handles);
  std::vector<std::string> sorted(set.begin(), set.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

// This backend's rank among handles: the position of its own handle.
int memberRank(
    const std::vector<std::string>& handles, const std::string& handle) {
  TORCH_CHECK_VALUE(!handles.empty(), "gonccl: reconfigure: no member handles");
  TORCH_CHECK_VALUE(
      std::set<std::string>(handles.begin(), handles.end()).size() ==
          handles.size(),
      "gonccl: reconfigure: a handle is listed twice");
  auto mine = std::find(handles.begin(), handles.end(), handle);
  TORCH_CHECK_VALUE(
      mine != handles.end(),
      "gonccl: reconfigure: this backend's handle ",
      handle,
      " is not among the ",
      handles.size(),
      " members");
  return static_cast<int>(mine - handles.begin());
}

// The new communicator's epoch: one past the newest that any of the size
// members publishes in store (this one, rank, publishes epoch).
uint32_t nextEpoch(c10d::Store& store, int rank, int size, uint32_t epoch) {
  store.set("epoch/" + std::to_string(rank), std::to_string(epoch));
  uint32_t newest = 0;
  for (int r = 0; r < size; ++r) {
    std::vector<uint8_t> v = store.get("epoch/" + std::to_string(r));
    newest = std::max<uint32_t>(
        newest,
        static_cast<uint32_t>(std::stoul(std::string(v.begin(), v.end()))));
  }
  return newest + 1;
}

}  // namespace

c10d::ReconfigureHandle GoncclBackend::get_reconfigure_handle() const {
  return handle();
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::reconfigure(
    const c10d::ReconfigureOptions& opts) {
  const std::vector<std::string> handles = members(opts);
  const int rank = memberRank(handles, handle());
  checkNotForked();
  const Library& L = lib();
  const int size = static_cast<int>(handles.size());
  const auto timeout = opts.timeout.value_or(timeout_);

  // The old communicator goes first: its pending ops fail now, and its
  // connections and goroutines are released before the new one is made.
  // A thread issuing on a full queue holds issueMutex_ until Go makes room:
  // wait for it without the GIL.
  GilRelease noGil;
  goncclComm_t old = nullptr;
  std::shared_ptr<CompletionQueue> oldQueue;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    TORCH_CHECK(
        !closed_, "gonccl: reconfigure: the process group has been shut down");
    old = std::exchange(comm_, nullptr);
    oldQueue = std::exchange(queue_, CompletionQueue::create());
  }
  if (old != nullptr) {
    goncclResult_t rc = L.commAbort(old);
    if (rc != goncclSuccess) {
      TORCH_WARN(
          "gonccl: reconfigure: goncclCommAbort failed: ",
          errorString(rc, nullptr));
    }
  }
  oldQueue->drain(kReconfigureDrain);
  oldQueue->stop();

  auto store = c10::make_intrusive<c10d::PrefixStore>(
      "gonccl/reconfigure/" + std::to_string(opts.uuid) + "/", store_);
  store->setTimeout(timeout);
  const uint32_t epoch = nextEpoch(*store, rank, size, epoch_);

  const goncclUniqueId id =
      shareUniqueId(*store, "unique_id", rank, size, "reconfigure: ");
  goncclComm_t comm = nullptr;
  goncclResult_t rc =
      L.commInitRankEpoch(&comm, size, id, rank, timeout.count(), epoch);
  if (rc != goncclSuccess) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "gonccl: reconfigure to rank ",
            rank,
            " of ",
            size,
            " (uuid ",
            opts.uuid,
            ") failed: ",
            errorString(rc, L.getLastError(nullptr))));
  }
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    comm_ = comm;
    rank_ = rank;
    size_ = size;
    epoch_ = epoch;
    seq = seq_;
  }
  auto work = c10::make_intrusive<GoncclWork>(
      rank,
      c10d::OpType::UNKNOWN,
      "gonccl:reconfigure",
      "reconfigure",
      seq,
      std::vector<at::Tensor>{},
      std::vector<at::Tensor>{});
  work->complete("");
  return work;
}

#endif

}  // namespace gonccl
