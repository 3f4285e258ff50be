// deadline.hpp: the time left before a deadline, in the whole milliseconds that
// c10d and the C ABI take. Every duration gonccl derives from a deadline goes
// through timeLeft, so that neither rounding nor a deadline already passed
// turns into a value that means something else: 0 ms is "no limit" to
// Work::wait and -1 ms is c10d's kUnsetTimeout ("the group's timeout"), while
// goncclCommSetTimeout takes 0 as "already passed".
// No torch here: tests/csrc/deadline_test.cpp compiles it on its own.
#pragma once

#include <algorithm>
#include <chrono>

namespace gonccl {

using Clock = std::chrono::steady_clock;

// The deadline budget after start. A budget of 0 or less has passed at start;
// one too large for the clock is the clock's end of time.
inline Clock::time_point deadlineAfter(
    Clock::time_point start, std::chrono::milliseconds budget) {
  if (budget.count() <= 0) {
    return start;
  }
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(
      Clock::time_point::max() - start);
  if (budget >= room) {
    return Clock::time_point::max();
  }
  return start + budget;
}

// The milliseconds left from now until deadline, rounded up: a remainder below
// 1 ms is 1 ms, never 0; a deadline that has passed (or is now) is 0, never
// negative.
inline std::chrono::milliseconds timeLeft(
    Clock::time_point deadline, Clock::time_point now) {
  if (deadline <= now) {
    return std::chrono::milliseconds(0);
  }
  return std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

inline std::chrono::milliseconds timeLeft(Clock::time_point deadline) {
  return timeLeft(deadline, Clock::now());
}

}  // namespace gonccl
