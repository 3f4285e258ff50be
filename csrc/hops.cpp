#include "hops.hpp"

#include <time.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "library.hpp"

namespace gonccl {
namespace hops {
namespace {

std::atomic<bool> enabled{false};
std::atomic<bool> fast{true};
std::array<std::atomic<int64_t>, kNumHops> sums{};
std::array<std::atomic<int64_t>, kNumHops> counts{};

constexpr const char* kNames[kNumHops] = {
    "c++: issue (Work, cgo call, registration)",
    "c++: go callback -> completion thread",
    "c++: complete (free, future, finish)",
    "c++: waiter completes the op itself",
    "c++: completed -> wait() returns",
    "c++: issue -> wait() returns",
};

}  // namespace

void configure() {
  const char* v = std::getenv("GONCCL_DEBUG_HOPS");
  if (v != nullptr && std::strcmp(v, "1") == 0) {
    enabled.store(true);
  }
  const char* f = std::getenv("GONCCL_FAST_PATH");
  fast.store(f == nullptr || std::strcmp(f, "0") != 0);
}

bool fastPath() {
  return fast.load(std::memory_order_relaxed);
}

int64_t now() {
  if (!enabled.load(std::memory_order_relaxed)) {
    return 0;
  }
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t record(Hop h, int64_t start, int64_t end) {
  if (start == 0 || end == 0) {
    return end;
  }
  sums[h].fetch_add(end - start, std::memory_order_relaxed);
  counts[h].fetch_add(1, std::memory_order_relaxed);
  return end;
}

std::vector<std::tuple<std::string, int64_t, int64_t>> stats(bool reset) {
  std::vector<std::tuple<std::string, int64_t, int64_t>> out;
  for (int h = 0; h < kNumHops; ++h) {
    int64_t n = reset ? counts[h].exchange(0) : counts[h].load();
    int64_t s = reset ? sums[h].exchange(0) : sums[h].load();
    out.emplace_back(kNames[h], n, s);
  }
  if (!libraryLoaded()) {
    return out;
  }
  size_t needed = 0;
  lib().debugHops(nullptr, 0, 0, &needed);
  std::string text(needed + 256, '\0');
  lib().debugHops(text.data(), text.size(), reset ? 1 : 0, &needed);
  text.resize(std::strlen(text.c_str()));
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    size_t a = line.find('\t');
    size_t b = line.find('\t', a + 1);
    if (a == std::string::npos || b == std::string::npos) {
      continue;
    }
    out.emplace_back(
        line.substr(0, a),
        std::stoll(line.substr(a + 1, b - a - 1)),
        std::stoll(line.substr(b + 1)));
  }
  return out;
}

}  // namespace hops
}  // namespace gonccl
