// deadline_test.cpp: csrc/deadline.hpp on its own (no torch): the time left before
// a deadline is whole milliseconds rounded up, 0 once it has passed, never negative,
// and a budget too large for the clock does not wrap around. Exits 1 on a failure.
#include <chrono>
#include <cstdio>

#include "deadline.hpp"

using gonccl::Clock;
using gonccl::deadlineAfter;
using gonccl::timeLeft;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::nanoseconds;

static int failures = 0;

static void expect(bool ok, const char* what, long long got, long long want) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s: got %lld, want %lld\n", what, got, want);
    ++failures;
  }
}

static void left(Clock::time_point deadline, Clock::time_point now, long long want, const char* what) {
  const long long got = timeLeft(deadline, now).count();
  expect(got == want, what, got, want);
}

int main() {
  const Clock::time_point t0 = Clock::now();
  left(t0, t0, 0, "a deadline now has no time left");
  left(t0, t0 + milliseconds(5), 0, "a deadline passed 5 ms ago has none, not -5 ms");
  left(t0, t0 + nanoseconds(1), 0, "passed by 1 ns");
  left(t0 + nanoseconds(1), t0, 1, "1 ns left is 1 ms, not 0 (no limit to Work::wait)");
  left(t0 + microseconds(400), t0, 1, "0.4 ms left rounds up to 1 ms");
  left(t0 + microseconds(999), t0, 1, "0.999 ms left");
  left(t0 + milliseconds(1), t0, 1, "exactly 1 ms");
  left(t0 + microseconds(1001), t0, 2, "1.001 ms rounds up to 2 ms");
  left(t0 + milliseconds(1500), t0 + microseconds(300), 1500, "1499.7 ms left");

  expect(deadlineAfter(t0, milliseconds(0)) == t0, "a budget of 0 has passed at the start", 0, 0);
  expect(deadlineAfter(t0, milliseconds(-7)) == t0, "a negative budget has passed at the start", 0, 0);
  expect(deadlineAfter(t0, milliseconds(250)) == t0 + milliseconds(250), "a 250 ms budget", 0, 0);
  const auto huge = milliseconds(std::chrono::milliseconds::max());
  expect(deadlineAfter(t0, huge) == Clock::time_point::max(), "an endless budget ends at the clock's end", 0, 0);
  expect(timeLeft(deadlineAfter(t0, huge), t0).count() > 0, "and has time left", 0, 0);
  // Nanoseconds hold about 292 years: a budget of 300 years must not wrap around.
  const auto years300 = std::chrono::duration_cast<milliseconds>(std::chrono::hours(24 * 365 * 300));
  expect(deadlineAfter(t0, years300) > t0, "300 years does not wrap into the past", 0, 0);

  if (failures == 0) {
    std::printf("deadline_test: ok\n");
  }
  return failures == 0 ? 0 : 1;
}
