// errors.hpp: the exceptions csrc throws for what an op was handed, with
// messages "gonccl: <op>: <what is wrong>". The message is formatted only when
// throwing: the success path builds no string.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <c10/macros/Macros.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>

namespace gonccl {

// The message of the last failure of a check on this thread (fail() records
// it): what a rank that refuses a collective tells its peers
// (GoncclBackend::Checking).
inline std::string& lastFailure() {
  thread_local std::string message;
  return message;
}

// Throws E (c10::ValueError, c10::TypeError, c10::DistBackendError: what
// Python sees) with the message "gonccl: <op>: " followed by args, written as
// c10::str writes them, and records it (lastFailure).
template <typename E, typename... Args>
[[noreturn]] C10_NOINLINE void fail(const char* op, const Args&... args) {
  std::string message = c10::str("gonccl: ", op, ": ", args...);
  lastFailure() = message;
  throw E(
      {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      std::move(message));
}

// An op's name in messages ("all_reduce") and its profiling title
// ("gonccl:all_reduce"), both string literals (the profiler keeps the title's
// pointer); GONCCL_OP("all_reduce") makes the pair from one literal at compile
// time. It converts to its name, so checks and fail() take it as the op.
struct OpName {
  const char* name;
  const char* title;

  constexpr operator const char*() const {
    return name;
  }
};

#define GONCCL_OP(literal) (::gonccl::OpName{literal, "gonccl:" literal})

}  // namespace gonccl
