// suspend.cpp: what torch 2.12-2.15 added around a backend's life: suspend /
// resume / getMemoryStats, eagerConnectSingleDevice and merge.
#include <string>
#include <unordered_map>

#include <c10/util/Exception.h>

#include "backend.hpp"
#include "gil.hpp"
#include "library.hpp"

namespace gonccl {

void GoncclBackend::suspendComm() {
  constexpr const char* what = "suspend";
  // Ops issued before suspend finish first; Go then refuses new ones.
  waitForPendingWorks();
  GilRelease noGil;
  std::lock_guard<std::mutex> guard(issueMutex_);
  goncclComm_t comm = liveComm(what);
  goncclResult_t rc = lib().commSuspend(comm);
  if (rc != goncclSuccess) {
    fail<c10::DistBackendError>(
        what, errorString(rc, lib().getLastError(comm)), rankNote_);
  }
}

void GoncclBackend::resumeComm() {
  constexpr const char* what = "resume";
  GilRelease noGil;
  std::lock_guard<std::mutex> guard(issueMutex_);
  goncclComm_t comm = liveComm(what);
  goncclResult_t rc = lib().commResume(comm);
  if (rc != goncclSuccess) {
    fail<c10::DistBackendError>(
        what, errorString(rc, lib().getLastError(comm)), rankNote_);
  }
}

std::unordered_map<std::string, uint64_t> GoncclBackend::memoryStats() {
  constexpr const char* what = "memory stats";
  GilRelease noGil;
  goncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    comm = liveComm(what);
  }
  goncclMemoryStats_t s{};
  goncclResult_t rc = lib().commMemoryStats(comm, &s);
  if (rc != goncclSuccess) {
    fail<c10::DistBackendError>(
        what, errorString(rc, lib().getLastError(comm)), rankNote_);
  }
  auto u = [](int64_t v) { return static_cast<uint64_t>(v < 0 ? 0 : v); };
  return {
      {"host_scratch_bytes", u(s.scratchBytes + s.workBytes)},
      {"shm_ring_bytes", u(s.shmRingBytes)},
      {"pinned_pool_bytes", u(s.pinnedBytes)},
      {"device_scratch_bytes", u(s.deviceScratchBytes)},
  };
}

void GoncclBackend::eagerConnectSingleDevice(at::Device /*device*/) {
  // One communicator serves every device: the device changes nothing.
  constexpr const char* what = "eager connect";
  GilRelease noGil;
  goncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    comm = liveComm(what);
  }
  goncclResult_t rc = lib().commConnectAll(comm);
  if (rc != goncclSuccess) {
    fail<c10::DistBackendError>(
        what, errorString(rc, lib().getLastError(comm)), rankNote_);
  }
}

int GoncclBackend::connectedPeers() {
  constexpr const char* what = "connected peers";
  GilRelease noGil;
  goncclComm_t comm = nullptr;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    comm = liveComm(what);
  }
  int n = 0;
  goncclResult_t rc = lib().commConnectedPeers(comm, &n);
  if (rc != goncclSuccess) {
    fail<c10::DistBackendError>(
        what, errorString(rc, lib().getLastError(comm)), rankNote_);
  }
  return n;
}

c10::intrusive_ptr<c10d::Backend> GoncclBackend::merge(
    const c10::intrusive_ptr<c10d::Store>& store,
    const c10::intrusive_ptr<Options>& opts,
    const int& rank,
    const int& size) {
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    if (mergedStore_ == store.get()) {
      if (auto again = merged_.lock()) {
        return again;
      }
    }
  }
  // This group's knobs (algorithm, chunk size); torch's timeout and name.
  auto options = c10::make_intrusive<GoncclOptions>(*options_);
  if (opts) {
    options->timeout = opts->timeout;
    options->group_name = opts->group_name;
  }
  // The merged group's ranks are numbered by torch, in the order they
  // arrived: none of this group's global ranks apply.
  options->global_ranks_in_group.clear();
  GilRelease noGil;
  c10::intrusive_ptr<c10d::Backend> made = c10::make_intrusive<GoncclBackend>(
      store, rank, size, options, libraryPath_);
  std::lock_guard<std::mutex> guard(issueMutex_);
  mergedStore_ = store.get();
  merged_ = c10::weak_intrusive_ptr<c10d::Backend>(made);
  return made;
}

}  // namespace gonccl
