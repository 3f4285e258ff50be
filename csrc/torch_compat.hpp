// torch_compat.hpp: what differs between the torch releases csrc builds against
// (2.11 through 2.15; scripts/csrc_compat.py compiles csrc against each).
#pragma once

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

// True when the torch being built against is major.minor or newer.
#define GONCCL_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||         \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// c10d::Backend::gather_into_tensor (dist.gather_into_tensor) appeared in 2.14;
// before it there is nothing to override and torch never asks a backend for it.
#define GONCCL_HAS_GATHER_INTO_TENSOR GONCCL_TORCH_AT_LEAST(2, 14)

namespace gonccl {

// The factor of a PREMUL_SUM reduce op: NCCLPreMulSumSupplement until 2.12,
// renamed PreMulSumSupplement in 2.13 (the old name kept as an alias there).
#if GONCCL_TORCH_AT_LEAST(2, 13)
using PreMulSumSupplement = c10d::PreMulSumSupplement;
#else
using PreMulSumSupplement = c10d::NCCLPreMulSumSupplement;
#endif

}  // namespace gonccl
