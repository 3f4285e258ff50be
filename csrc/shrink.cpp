// shrink.cpp: GoncclBackend::shrink, torch's shrink_group on gonccl.
//
// gonccl shrinks by making a fresh communicator of the survivors, one
// generation (epoch) after this one: its frames and connections carry the new
// epoch, so nothing of the old generation (a late frame, a dead rank coming
// back) is mixed into it. The survivors meet through this group's store under a
// prefix of their own (the new epoch and the excluded ranks), where the new
// rank 0 publishes the new unique id. The excluded ranks take no part: they may
// be dead, hung or healthy. Recovery after a lost rank is then: the survivors'
// ops fail (a closed connection is seen at once; a silent peer after
// GONCCL_HEARTBEAT_TIMEOUT_MS), they call shrink_group, and the new group is
// ready once every survivor has joined it.
#include "backend.hpp"

#include <algorithm>
#include <string>

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "gil.hpp"
#include "library.hpp"

namespace gonccl {

#if TORCH_VERSION_MAJOR > 2 || \
    (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 10)

namespace {

constexpr int kShrinkAbort = 0x01;  // torch.distributed.SHRINK_ABORT

}  // namespace

c10::intrusive_ptr<c10d::Backend> GoncclBackend::shrink(
    const std::vector<int64_t>& ranks_to_exclude,
    int shrink_flags,
    const c10::intrusive_ptr<Options>& opts_override) {
  TORCH_CHECK_VALUE(
      (shrink_flags & ~kShrinkAbort) == 0,
      "gonccl: shrink: unknown shrink_flags ",
      shrink_flags,
      " (SHRINK_DEFAULT = 0, SHRINK_ABORT = 1)");
  TORCH_CHECK_VALUE(
      !ranks_to_exclude.empty(), "gonccl: shrink: no rank to exclude");
  std::vector<int64_t> excluded(ranks_to_exclude);
  std::sort(excluded.begin(), excluded.end());
  for (size_t i = 0; i < excluded.size(); ++i) {
    TORCH_CHECK_VALUE(
        excluded[i] >= 0 && excluded[i] < size_,
        "gonccl: shrink: rank ",
        excluded[i],
        " is out of range for a group of size ",
        size_);
    TORCH_CHECK_VALUE(
        i == 0 || excluded[i] != excluded[i - 1],
        "gonccl: shrink: rank ",
        excluded[i],
        " is excluded twice");
  }
  TORCH_CHECK_VALUE(
      static_cast<int64_t>(excluded.size()) < size_,
      "gonccl: shrink: cannot exclude all ",
      size_,
      " ranks");
  TORCH_CHECK_VALUE(
      !std::binary_search(excluded.begin(), excluded.end(), rank_),
      "gonccl: shrink: rank ",
      rank_,
      " is excluded and must not call shrink");
  checkNotForked();

  const int newRank =
      rank_ - static_cast<int>(
                  std::lower_bound(excluded.begin(), excluded.end(), rank_) -
                  excluded.begin());
  const int newSize = size_ - static_cast<int>(excluded.size());
  const uint32_t newEpoch = epoch_ + 1;
  std::string prefix = "gonccl/shrink/epoch" + std::to_string(newEpoch) + "/x";
  for (int64_t r : excluded) {
    prefix += "_" + std::to_string(r);
  }
  prefix += "/";
  auto timeout = timeout_;
  if (opts_override) {
    timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        opts_override->timeout);
  }
  if (shrink_flags & kShrinkAbort) {
    abort();
  }
  GilRelease noGil;
  return c10::make_intrusive<GoncclBackend>(
      c10::make_intrusive<c10d::PrefixStore>(prefix, store_),
      newRank,
      newSize,
      timeout,
      libraryPath_,
      newEpoch);
}

#endif

}  // namespace gonccl
