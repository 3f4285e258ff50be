// checks.hpp: validation of what torch hands the backend, before anything
// reaches Go. Every failure throws with a message that starts with
// "gonccl: <op>: " and names the problem:
//   unsupported dtype                                  -> TypeError
//   sparse / non-CPU / non-contiguous / wrong count /
//   size mismatch / bad root / unsupported reduce op   -> ValueError
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "gonccl.h"

namespace gonccl {

// A dense, contiguous CPU tensor of a supported dtype; returns its dtype.
goncclDataType_t checkTensor(const at::Tensor& t, const char* op);

// tensors.size() == expected.
void checkCount(
    const std::vector<at::Tensor>& tensors,
    size_t expected,
    const char* op,
    const char* what = "tensor");

// Same dtype as the reference tensor (TypeError otherwise).
void checkSameDtype(
    const at::Tensor& t,
    const at::Tensor& ref,
    const char* op,
    const char* what);

goncclRedOp_t toRedOp(const c10d::ReduceOp& reduceOp, const char* op);

}  // namespace gonccl
