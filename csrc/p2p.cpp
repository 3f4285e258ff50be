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
    C10_THROW_ERROR(
        ValueError,
        c10::str(
            "gonccl: ",
            op,
            ": peer rank ",
            peer,
            " is out of range for a group of size ",
            size));
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
  constexpr const char* op = "send";
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  checkPeer(dstRank, size_, op);
  auto fn = need(lib().sendAsync, "goncclSendAsync", op);
  const void* buf = t.data_ptr();
  size_t count = t.numel();
  return issue(
      {c10d::OpType::SEND, "gonccl:send", op, {t}, {t}}, [&](Parts& p) {
        return p.add(
            fn(buf, count, type, dstRank, tag, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::recv(
    std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  constexpr const char* op = "recv";
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  checkPeer(srcRank, size_, op);
  auto fn = need(lib().recvAsync, "goncclRecvAsync", op);
  void* buf = t.data_ptr();
  size_t count = t.numel();
  return issue(
      {c10d::OpType::RECV, "gonccl:recv", op, {t}, {t}}, [&](Parts& p) {
        return p.add(
            fn(buf, count, type, srcRank, tag, p.comm, p.stream, p.next()));
      });
}

c10::intrusive_ptr<c10d::Work> GoncclBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  constexpr const char* op = "recv from any source";
  checkCount(tensors, 1, op);
  at::Tensor t = tensors[0];
  goncclDataType_t type = checkTensor(t, op);
  auto fn = need(lib().recvAsync, "goncclRecvAsync", op);
  need(lib().requestSource, "goncclRequestSource", op);
  void* buf = t.data_ptr();
  size_t count = t.numel();
  return issue(
      {c10d::OpType::RECVANYSOURCE,
       "gonccl:recv_anysource",
       op,
       {t},
       {t},
       {},
       nullptr,
       /*anySource=*/true},
      [&](Parts& p) {
        return p.add(
            fn(buf,
               count,
               type,
               GONCCL_ANY_SOURCE,
               tag,
               p.comm,
               p.stream,
               p.next()));
      });
}

void GoncclBackend::monitoredBarrier(
    const c10d::BarrierOptions& opts, bool waitAllRanks) {
  constexpr const char* op = "monitored_barrier";
  need(lib().sendAsync, "goncclSendAsync", op);
  need(lib().recvAsync, "goncclRecvAsync", op);
  const auto timeout =
      opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining = [&]() {
    return std::max(
        std::chrono::milliseconds(1),
        std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now()));
  };
  auto token = [] { return at::zeros({1}, at::kLong); };
  if (size_ == 1) {
    return;
  }
  if (rank_ != 0) {
    // Report to rank 0, then wait to be released.
    std::vector<at::Tensor> out{token()};
    std::vector<at::Tensor> in{token()};
    auto sent = send(out, 0, kMonitoredBarrierTag);
    auto released = recv(in, 0, kMonitoredBarrierTag);
    try {
      sent->wait(remaining());
      released->wait(remaining());
    } catch (const std::exception& e) {
      C10_THROW_ERROR(
          DistBackendError,
          c10::str(
              "[Rank ",
              rank_,
              "]: Rank ",
              rank_,
              " reached monitoredBarrier but was not released by rank 0 "
              "within ",
              timeout.count(),
              " ms; check rank 0's error for the rank(s) that did not "
              "arrive (",
              message(e),
              ")"));
    }
    return;
  }
  // Rank 0: wait for every other rank's report.
  std::vector<c10::intrusive_ptr<c10d::Work>> arrivals;
  std::vector<std::vector<at::Tensor>> buffers(size_);
  for (int r = 1; r < size_; ++r) {
    buffers[r] = {token()};
    arrivals.push_back(recv(buffers[r], r, kMonitoredBarrierTag));
  }
  std::vector<int> missing;
  std::string firstError;
  for (int r = 1; r < size_; ++r) {
    try {
      arrivals[r - 1]->wait(remaining());
    } catch (const std::exception& e) {
      missing.push_back(r);
      if (firstError.empty()) {
        firstError = message(e);
      }
      if (!waitAllRanks) {
        break;
      }
    }
  }
  if (!missing.empty()) {
    C10_THROW_ERROR(
        DistBackendError,
        c10::str(
            "[Rank 0]: ",
            missing.size() == 1 ? "Rank " : "Ranks ",
            joinRanks(missing),
            " failed to pass monitoredBarrier in ",
            timeout.count(),
            " ms (first error: ",
            firstError,
            ")"));
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> releases;
  for (int r = 1; r < size_; ++r) {
    std::vector<at::Tensor> out{token()};
    releases.push_back(send(out, r, kMonitoredBarrierTag));
  }
  for (auto& w : releases) {
    w->wait(remaining());
  }
}

}  // namespace gonccl
