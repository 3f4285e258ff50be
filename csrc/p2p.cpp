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

}  // namespace

c10::intrusive_ptr<c10d::Work> GoncclBackend::send(
    std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  constexpr OpName op = GONCCL_OP("send");
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  checkPeer(dstRank, size_, op);
  return issueCall(
      {c10d::OpType::SEND, op, {t}, {t}},
      lib().sendAsync,
      t.data_ptr(),
      t.numel(),
      type,
      dstRank,
      tag);
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::recv(
    std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  constexpr OpName op = GONCCL_OP("recv");
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  checkPeer(srcRank, size_, op);
  return issueCall(
      {c10d::OpType::RECV, op, {t}, {t}},
      lib().recvAsync,
      t.data_ptr(),
      t.numel(),
      type,
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
// ones it did not. Unlike Gloo, rank 0 also tells the ranks that did arrive
// that the barrier failed, so they fail at once, naming the missing ranks,
// instead of at their own timeout.
void GoncclBackend::monitoredBarrier(
    const c10d::BarrierOptions& opts, bool waitAllRanks) {
  std::chrono::milliseconds timeout;
  uint32_t call = 0;
  {
    std::lock_guard<std::mutex> guard(issueMutex_);
    timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
    call = monitoredBarriers_++;
  }
  if (size_ == 1) {
    return;
  }
  // Two tags per call, below the one earlier gonccl versions used, clear of
  // small user tags.
  const int tagIn =
      kMonitoredBarrierTag - 2 - static_cast<int>(call % (1 << 20)) * 2;
  const int tagOut = tagIn - 1;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
  };
  auto token = [](int64_t v) { return at::full({1}, v, at::kLong); };
  if (rank_ != 0) {
    // Rank 0 answers within its timeout (each rank's, if waitAllRanks): wait
    // for its answer a timeout longer than that.
    CallTimeout callTimeout(timeout * (waitAllRanks ? size_ : 2));
    std::vector<at::Tensor> out{token(rank_)};
    std::vector<at::Tensor> in{token(0)};
    auto sent = send(out, 0, tagIn);
    auto released = recv(in, 0, tagOut);
    std::string failure;
    try {
      sent->wait();
      released->wait();
      // rank 0 sends -1 - (the first missing rank) when the barrier failed.
      const int64_t verdict = in[0].item<int64_t>();
      if (verdict < 0) {
        failure = c10::str(
            "rank 0 reported that rank ",
            -1 - verdict,
            " failed to pass monitoredBarrier in ",
            timeout.count(),
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
              rank_,
              " successfully reached monitoredBarrier, but received errors "
              "while waiting for send/recv from rank 0. Please check rank 0 "
              "logs for faulty rank.\n Original exception: \n",
              failure));
    }
    return;
  }
  // Rank 0: a receive per rank, posted at once, each bounded by the timeout
  // (all of it, if waitAllRanks).
  CallTimeout callTimeout(timeout * (waitAllRanks ? size_ - 1 : 1));
  std::vector<c10::intrusive_ptr<c10d::Work>> arrivals(size_);
  std::vector<std::vector<at::Tensor>> buffers(size_);
  for (int r = 1; r < size_; ++r) {
    buffers[r] = {token(-1)};
    arrivals[r] = recv(buffers[r], r, tagIn);
  }
  std::vector<int> processed;
  std::vector<int> failed;
  std::string firstError;
  std::string ranOut;
  for (int r = 1; r < size_; ++r) {
    auto wait = timeout;
    if (!waitAllRanks) {
      wait = timeout - elapsed();
      if (wait.count() <= 0) {
        std::vector<int> left;
        for (int q = r; q < size_; ++q) {
          left.push_back(q);
        }
        ranOut = c10::str(
            "Rank 0 timed out in monitoredBarrier after ",
            timeout.count(),
            " ms. Successfully processed ranks: ",
            processed.empty() ? "none" : joinRanks(processed),
            "; not processed: ",
            joinRanks(left));
        failed.push_back(r);
        break;
      }
    }
    try {
      arrivals[r]->wait(wait);
      processed.push_back(r);
    } catch (const std::exception& e) {
      failed.push_back(r);
      if (firstError.empty()) {
        firstError = message(e);
      }
      if (!waitAllRanks) {
        break;
      }
    }
  }
  // Release the ranks that arrived (including those not waited for after a
  // failure): with 0, or with the failure.
  std::vector<int> arrived = processed;
  for (int r = 1; r < size_; ++r) {
    if (std::find(processed.begin(), processed.end(), r) == processed.end() &&
        std::find(failed.begin(), failed.end(), r) == failed.end() &&
        arrivals[r]->isCompleted() && arrivals[r]->isSuccess()) {
      arrived.push_back(r);
    }
  }
  const int64_t verdict = failed.empty() ? 0 : -1 - failed.front();
  std::vector<c10::intrusive_ptr<c10d::Work>> releases;
  for (int r : arrived) {
    std::vector<at::Tensor> out{token(verdict)};
    releases.push_back(send(out, r, tagOut));
  }
  std::vector<int> unreleased;
  for (size_t i = 0; i < releases.size(); ++i) {
    try {
      releases[i]->wait();
    } catch (const std::exception&) {
      unreleased.push_back(arrived[i]);
    }
  }
  if (!ranOut.empty()) {
    C10_THROW_ERROR(DistBackendError, ranOut);
  }
  if (!failed.empty()) {
    if (waitAllRanks) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(
              "[Rank 0]: Ranks ",
              joinRanks(failed),
              " failed to pass monitoredBarrier in ",
              timeout.count(),
              " ms\n Original exception: \n",
              firstError));
    }
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "[Rank 0]: Rank ",
            failed.front(),
            " failed to pass monitoredBarrier in ",
            timeout.count(),
            " ms\n Original exception: \n",
            firstError));
  }
  TORCH_CHECK(
      unreleased.empty(),
      "[Rank 0]: failed to ack ranks ",
      joinRanks(unreleased),
      " in monitoredBarrier; these ranks may remain blocked");
}

}  // namespace gonccl
