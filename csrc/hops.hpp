// hops.hpp: the C++ half of per-hop timing (GONCCL_DEBUG_HOPS=1; the Go half
// is core/hops.go). Each hop is an interval between two CLOCK_MONOTONIC stamps
// of one op; the process keeps a sum and a count per hop. Off, now() returns 0
// and record() does nothing.
//
//   issue       GoncclBackend::issue entered -> returned (Work, cgo call,
//               completion registered)
//   to thread   Go's completion callback -> the completion thread picks the
//               op up
//   complete    a completion thread's (or waiter's) processing: error text,
//               freeing the request, copy-out, future, finish
//   inline      a waiter's own completion: Go reported the op done -> the
//               Work completed on the waiting thread
//   wake        the Work completed on another thread -> wait() returns
//   issue->wait GoncclBackend::issue entered -> wait() returns (the op seen
//               from C++; the rest of the Python-measured time is Python and
//               torch's dispatch)
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace gonccl {
namespace hops {

enum Hop {
  kIssue,
  kToThread,
  kComplete,
  kInline,
  kWake,
  kIssueToWait,
  kNumHops
};

// Turns timing on if GONCCL_DEBUG_HOPS=1, and the waiter's own completion off
// if GONCCL_FAST_PATH=0 (read at every backend creation).
void configure();

// False if GONCCL_FAST_PATH=0: every op is completed by the completion thread.
bool fastPath();

// CLOCK_MONOTONIC in ns, or 0 when timing is off.
int64_t now();

// Adds end - start to hop h (nothing if either stamp is 0); returns end.
int64_t record(Hop h, int64_t start, int64_t end);

// Records start -> now() and returns now().
inline int64_t since(Hop h, int64_t start) {
  return start == 0 ? 0 : record(h, start, now());
}

// (name, count, total ns) per hop, C++'s then Go's (goncclDebugHops, if the
// library is loaded and has it); reset zeroes them after reading.
std::vector<std::tuple<std::string, int64_t, int64_t>> stats(bool reset);

}  // namespace hops
}  // namespace gonccl
