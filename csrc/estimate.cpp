// estimate.cpp: the time estimator. Ops issued between beginEstimate and
// finishEstimate run nothing: each is priced by the cost model that chooses
// its algorithm (goncclCommEstimate) and completes at once.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <c10/util/Exception.h>

#include "backend.hpp"
#include "gil.hpp"
#include "library.hpp"
#include "work.hpp"

namespace gonccl {
namespace {

constexpr const char* kWhat = "time estimate";

// How an op (by its name, GONCCL_OP's) maps onto the model.
struct Priced {
  const char* name;
  goncclOpKind_t kind;
  bool fromOutputs;  // the size is the outputs' (reduce_scatter, scatter)
  bool perTensor;    // one Go op per tensor (the *_tensor_coalesced ones)
  bool perPeer;      // the size is split among the ranks (all_to_all)
};

constexpr Priced kPriced[] = {
    {"all_reduce", goncclOpAllReduce, false, false, false},
    {"all_reduce_coalesced", goncclOpAllReduce, false, false, false},
    {"broadcast", goncclOpBroadcast, false, false, false},
    {"reduce", goncclOpReduce, false, false, false},
    {"all_gather", goncclOpAllGather, false, false, false},
    {"all_gather_into_tensor", goncclOpAllGather, false, false, false},
    {"all_gather_coalesced", goncclOpAllGather, false, false, false},
    {"all_gather_into_tensor_coalesced", goncclOpAllGather, false, true, false},
    {"reduce_scatter", goncclOpReduceScatter, true, false, false},
    {"reduce_scatter_tensor", goncclOpReduceScatter, true, false, false},
    {"reduce_scatter_tensor_coalesced",
     goncclOpReduceScatter,
     true,
     true,
     false},
    {"gather", goncclOpGather, false, false, false},
    {"gather_into_tensor", goncclOpGather, false, false, false},
    {"scatter", goncclOpScatter, true, false, false},
    {"all_to_all", goncclOpAlltoAll, false, false, true},
    {"all_to_all_single", goncclOpAlltoAll, false, false, true},
    {"barrier", goncclOpBarrier, false, false, false},
    {"send", goncclOpSendRecv, false, false, false},
    {"recv", goncclOpSendRecv, true, false, false},
};

const Priced* priced(const char* name) {
  for (const Priced& p : kPriced) {
    if (std::strcmp(p.name, name) == 0) {
      return &p;
    }
  }
  return nullptr;
}

}  // namespace

void GoncclBackend::beginEstimate() {
  GilRelease noGil;
  std::lock_guard<std::mutex> guard(issueMutex_);
  liveComm(kWhat);
  if (estimating_) {
    fail<c10::DistBackendError>(
        kWhat,
        "this process group is already estimating (time estimators do not "
        "nest)");
  }
  estimating_ = true;
  estimatedUs_ = 0;
}

double GoncclBackend::finishEstimate() {
  GilRelease noGil;
  std::lock_guard<std::mutex> guard(issueMutex_);
  if (!estimating_) {
    fail<c10::DistBackendError>(
        kWhat, "no estimate was started on this process group");
  }
  estimating_ = false;
  return estimatedUs_;
}

c10::intrusive_ptr<GoncclWork> GoncclBackend::recordEstimate(
    Op& op, goncclComm_t comm) {
  const Priced* p = priced(op.name.name);
  if (p == nullptr) {
    fail<c10::DistBackendError>(
        op.name,
        "gonccl cannot estimate this op's time (it is not a collective or "
        "point-to-point op of the cost model); issue it outside the time "
        "estimator");
  }
  const std::vector<at::Tensor>& sized =
      p->fromOutputs ? op.outputs : op.inputs;
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const at::Tensor& t : sized) {
    const int64_t b = t.defined() ? t.numel() * t.element_size() : 0;
    total += b;
    if (p->perTensor) {
      sizes.push_back(b);
    }
  }
  if (!p->perTensor) {
    sizes.push_back(p->perPeer ? total / size_ : total);
  }
  double sum = 0;
  for (int64_t b : sizes) {
    double us = 0;
    goncclResult_t rc =
        lib().commEstimate(comm, p->kind, static_cast<size_t>(b), &us);
    if (rc != goncclSuccess) {
      fail<c10::DistBackendError>(
          op.name,
          "estimating its time failed: ",
          errorString(rc, lib().getLastError(comm)));
    }
    sum += us;
  }
  estimatedUs_ += sum;
  // Nothing runs: no staging copy-out either (the staging holds no result).
  auto work = c10::make_intrusive<GoncclWork>(
      rank_,
      op.type,
      op.name.title,
      op.name,
      seq_,
      std::move(op.inputs),
      std::move(op.outputs));
  work->complete("");
  return work;
}

}  // namespace gonccl
