// p2p.cpp: GoncclBackend's point-to-point ops and the monitored barrier
// built on them. Sends and receives progress independently of each other and
// of collectives (gonccl.h), so isend/irecv may be issued in any order.
#include <algorithm>
#include <chrono>
#include <limits>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"
#include "deadline.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

// The tag of monitoredBarrier's messages: out of the way of user tags.
constexpr int kMonitoredBarrierTag = std::numeric_limits<int>::max() - 1;

void checkPeer(int peer, int size, const char* op) {
  if (peer < 0 || peer >= size) {
    fail<c10::ValueError>(
        op, "peer rank ", peer, " is out of range for a group of size ", size);
  }
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  return out;
}

// An exception's message without the C++ backtrace c10 errors carry.
std::string message(const std::exception& e) {
  if (const auto* err = dynamic_cast<const c10::Error*>(&e)) {
    return err->what_without_backtrace();
  }
  return e.what();
}

// One monitoredBarrier call: its time limit, tags and deadline.
struct MonitoredBarrier {
  std::chrono::milliseconds timeout{0};  // 0: already passed at the call
  bool waitAllRanks = false;
  int tagIn = 0;               // reports to rank 0
  int tagOut = 0;              // rank 0's verdicts
  Clock::time_point deadline;  // the call's start + timeout
};

at::Tensor token(int64_t v) {
  return at::full({1}, v, at::kLong);
}

// A rank other than 0: reports, then waits for rank 0's verdict.
void reportToRankZero(GoncclBackend& b, const MonitoredBarrier& mb) {
  // Rank 0 answers within its timeout (each rank's, if waitAllRanks): wait
  // for its answer a timeout longer than that.
  GoncclBackend::CallTimeout callTimeout(
      mb.timeout * (mb.waitAllRanks ? b.getSize() : 2));
  std::vector<at::Tensor> out{token(b.getRank())};
  std::vector<at::Tensor> in{token(0)};
  std::string failure;
  try {
    // Issuing may fail too (a first send to rank 0 connects, within the
    // timeout): that is reported like a failed wait.
    auto sent = b.send(out, 0, mb.tagIn);
    auto released = b.recv(in, 0, mb.tagOut);
    sent->wait();
    released->wait();
    // rank 0 sends -1 - (the first missing rank) when the barrier failed.
    const int64_t verdict = in[0].item<int64_t>();
    if (verdict < 0) {
      failure = c10::str(
          "rank 0 reported that rank ",
          -1 - verdict,
          " failed to pass monitoredBarrier in ",
          mb.timeout.count(),
          " ms");
    }
  } catch (const std::exception& e) {
    failure = message(e);
  }
  if (!failure.empty()) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "Rank ",
            b.getRank(),
            " successfully reached monitoredBarrier, but received errors "
            "while waiting for send/recv from rank 0. Please check rank 0 "
            "logs for faulty rank.\n Original exception: \n",
            failure));
  }
}

// What rank 0 saw of the other ranks' reports.
struct Arrivals {
  std::vector<c10::intrusive_ptr<c10d::Work>> works;  // by rank (not 0)
  std::vector<int> processed;                         // arrived, in order
  std::vector<int> failed;                            // did not
  std::string firstError;
};

// Rank 0: a receive per rank, posted at once, each bounded by the timeout
// (all of it, if waitAllRanks), waited for in rank order.
Arrivals awaitArrivals(GoncclBackend& b, const MonitoredBarrier& mb) {
  const int size = b.getSize();
  GoncclBackend::CallTimeout callTimeout(
      mb.timeout * (mb.waitAllRanks ? size - 1 : 1));
  Arrivals a;
  a.works.resize(size);
  for (int r = 1; r < size; ++r) {
    std::vector<at::Tensor> buffer{token(-1)};
    a.works[r] = b.recv(buffer, r, mb.tagIn);
  }
  for (int r = 1; r < size; ++r) {
    // The time left, rounded up: a remainder below 1 ms is still waited for.
    const auto wait = mb.waitAllRanks ? mb.timeout : timeLeft(mb.deadline);
    if (wait.count() == 0 && !mb.waitAllRanks) {
      // The shared timeout has run out (or was 0): rank r is the first that
      // did not arrive in time, as Gloo says, and so are those after it.
      std::vector<int> left;
      for (int q = r; q < size; ++q) {
        left.push_back(q);
      }
      a.failed.push_back(r);
      a.firstError = c10::str(
          "Rank 0 timed out in monitoredBarrier after ",
          mb.timeout.count(),
          " ms. Successfully processed ranks: ",
          a.processed.empty() ? "none" : joinRanks(a.processed),
          "; not processed: ",
          joinRanks(left));
      break;
    }
    try {
      if (wait.count() == 0) {
        // waitAllRanks with a timeout of 0: the receives were issued with it
        // and fail at once unless their report is there (wait(0) is unbounded).
        a.works[r]->wait();
      } else {
        a.works[r]->wait(wait);
      }
      a.processed.push_back(r);
    } catch (const std::exception& e) {
      a.failed.push_back(r);
      if (a.firstError.empty()) {
        a.firstError = message(e);
      }
      if (!mb.waitAllRanks) {
        break;
      }
    }
  }
  return a;
}

// Rank 0: releases the ranks that arrived (including those not waited for
// after a failure) with 0, or with the failure; returns those it could not.
std::vector<int> releaseArrived(
    GoncclBackend& b, const MonitoredBarrier& mb, const Arrivals& a) {
  std::vector<int> arrived = a.processed;
  for (int r = 1; r < b.getSize(); ++r) {
    if (std::find(a.processed.begin(), a.processed.end(), r) ==
            a.processed.end() &&
        std::find(a.failed.begin(), a.failed.end(), r) == a.failed.end() &&
        a.works[r]->isCompleted() && a.works[r]->isSuccess()) {
      arrived.push_back(r);
    }
  }
  const int64_t verdict = a.failed.empty() ? 0 : -1 - a.failed.front();
  std::vector<c10::intrusive_ptr<c10d::Work>> releases;
  for (int r : arrived) {
    std::vector<at::Tensor> out{token(verdict)};
    releases.push_back(b.send(out, r, mb.tagOut));
  }
  std::vector<int> unreleased;
  for (size_t i = 0; i < releases.size(); ++i) {
    try {
      releases[i]->wait();
    } catch (const std::exception&) {
      unreleased.push_back(arrived[i]);
    }
  }
  return unreleased;
}

// Rank 0: waits for the others, releases them, and reports what failed.
void superviseBarrier(GoncclBackend& b, const MonitoredBarrier& mb) {
  const Arrivals a = awaitArrivals(b, mb);
  const std::vector<int> unreleased = releaseArrived(b, mb, a);
  if (!a.failed.empty()) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "[Rank 0]: ",
            mb.waitAllRanks ? "Ranks " : "Rank ",
            mb.waitAllRanks ? joinRanks(a.failed)
                            : std::to_string(a.failed.front()),
            " failed to pass monitoredBarrier in ",
            mb.timeout.count(),
            " ms\n Original exception: \n",
            a.firstError));
  }
  TORCH_CHECK(
      unreleased.empty(),
      "[Rank 0]: failed to ack ranks ",
      joinRanks(unreleased),
      " in monitoredBarrier; these ranks may remain blocked");
}

// send or recv (fn) of tensors[0] to or from peer.
template <typename Fn>
c10::intrusive_ptr<c10d::Work> pointToPoint(
    GoncclBackend& backend,
    c10d::OpType type,
    OpName op,
    Fn fn,
    std::vector<at::Tensor>& tensors,
    int peer,
    int tag) {
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t dtype = checkTensor(t, op);
  checkPeer(peer, backend.getSize(), op);
  return backend.issueCall(
      {type, op, {t}, {t}}, fn, t.data_ptr(), t.numel(), dtype, peer, tag);
}

}  // namespace

c10::intrusive_ptr<c10d::Work> GoncclBackend::send(
    std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  return pointToPoint(
      *this,
      c10d::OpType::SEND,
      GONCCL_OP("send"),
      lib().sendAsync,
      tensors,
      dstRank,
      tag);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::recv(
    std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  return pointToPoint(
      *this,
      c10d::OpType::RECV,
      GONCCL_OP("recv"),
      lib().recvAsync,
      tensors,
      srcRank,
      tag);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  constexpr OpName op{"recv from any source", "gonccl:recv_anysource"};
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  return issueCall(
      {c10d::OpType::RECVANYSOURCE,
       op,
       {t},
       {t},
       {},
       nullptr,
       /*anySource=*/true},
      lib().recvAsync,
      t.data_ptr(),
      t.numel(),
      type,
      GONCCL_ANY_SOURCE,
      tag);
}

// Gloo's protocol and messages: every other rank reports to rank 0 and waits
// to be released; rank 0 waits for each in turn (the whole call sharing one
// timeout, or each rank the full timeout if waitAllRanks) and names the rank
// that did not arrive (the first, or all of them if waitAllRanks), or, if the
// timeout ran out while it was still waiting, the ranks it processed and the
// ones it did not. A timeout of 0 has run out at the call: rank 0 reports
// every other rank as not processed, like Gloo, and the others time out at
// once waiting for rank 0. Unlike Gloo, rank 0 also tells the ranks that did
// arrive that the barrier failed, so they fail at once, naming the missing
// ranks, instead of at their own timeout.
void GoncclBackend::monitoredBarrier(
    const c10d::BarrierOptions& opts, bool waitAllRanks) {
  MonitoredBarrier barrier;
  barrier.waitAllRanks = waitAllRanks;
  uint32_t call = 0;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    barrier.timeout = std::max(
        opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout,
        std::chrono::milliseconds(0));
    call = monitoredBarriers_++;
  }
  if (size_ == 1) {
    return;
  }
  // Two tags per call, below the one earlier gonccl versions used, clear of
  // small user tags.
  barrier.tagIn =
      kMonitoredBarrierTag - 2 - static_cast<int>(call % (1 << 20)) * 2;
  barrier.tagOut = barrier.tagIn - 1;
  barrier.deadline = deadlineAfter(Clock::now(), barrier.timeout);
  if (rank_ != 0) {
    reportToRankZero(*this, barrier);
  } else {
    superviseBarrier(*this, barrier);
  }
}

}  // namespace gonccl
