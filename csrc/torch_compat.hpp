// torch_compat.hpp: what differs between the torch releases csrc builds against
// (2.11 through 2.15; scripts/csrc_compat.py compiles csrc against each).
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>

// True when the torch being built against is major.minor or newer.
#define GONCCL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10d::Backend::gather_into_tensor (dist.gather_into_tensor) appeared in 2.14;
// before it there is nothing to override and torch never asks a backend for it.
#define GONCCL_HAS_GATHER_INTO_TENSOR GONCCL_TORCH_AT_LEAST(2, 14)

// torch's completion hooks (Backend::registerCompletionHook, Work's completion
// key) and the supportsAbortHooks/supportsCompletionHooks queries came in 2.15
// (2.14 defines C10D_BACKEND_HAS_HOOKS with abort hooks only): gonccl supports
// the hooks from 2.15 on.
#if defined(C10D_BACKEND_HAS_HOOKS) && GONCCL_TORCH_AT_LEAST(2, 15)
#define GONCCL_HAS_HOOKS 1
#else
#define GONCCL_HAS_HOOKS 0
#endif

// One-sided windows (Backend::supportsWindow / new_window, c10d::Window) came
// in torch 2.15, which announces them with C10D_BACKEND_HAS_WINDOW.
#if defined(C10D_BACKEND_HAS_WINDOW) && GONCCL_TORCH_AT_LEAST(2, 15)
#define GONCCL_HAS_WINDOW 1
#else
#define GONCCL_HAS_WINDOW 0
#endif

// Backend::startTimeEstimate / endTimeEstimate (dist._time_estimator): 2.15.
// 2.11-2.14 declare supportsTimeEstimation but have nothing that asks a
// backend for an estimate.
#define GONCCL_HAS_TIME_ESTIMATE GONCCL_TORCH_AT_LEAST(2, 15)

// Backend::suspend / resume / getMemoryStats: 2.12.
#define GONCCL_HAS_SUSPEND GONCCL_TORCH_AT_LEAST(2, 12)

namespace gonccl {

// The factor of a PREMUL_SUM reduce op: NCCLPreMulSumSupplement until 2.12,
// renamed PreMulSumSupplement in 2.13 (the old name kept as an alias there).
#if GONCCL_TORCH_AT_LEAST(2, 13)
using PreMulSumSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
#endif

}  // namespace gonccl
