// checks.hpp: validation of what torch hands the backend, before anything
// reaches Go. Every failure throws with a message that starts with
// "gonccl: <op>: " and names the problem:
//   unsupported dtype, reduce op that has no meaning
//   for the dtype (BXOR on float, MAX on complex, any
//   reduction of float8)                               -> TypeError
//   sparse / not CPU or CUDA / CUDA in a build without
//   CUDA / non-contiguous / wrong count /
//   size mismatch / bad root / unsupported reduce op   -> ValueError
#pragma once

#include <cstddef>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "gonccl.h"

namespace gonccl {

// A dense (and, if contiguous, contiguous) CPU or CUDA tensor (CUDA only in a
// build with CUDA support) of a supported dtype; returns its dtype. That all of
// an op's tensors share one device is checked when it is issued.
goncclDataType_t checkTensor(
    const at::Tensor& t, const char* op, bool contiguous = true);

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

// t.numel() == expected (ValueError naming both otherwise).
void checkNumel(
    const at::Tensor& t, int64_t expected, const char* op, const char* what);

// 0 <= root < size.
void checkRoot(int64_t root, int size, const char* op);

// n * size (elements per rank times ranks), or a ValueError if that overflows
// int64 (a tensor that big cannot exist; a wrapped product would pass the size
// checks that follow it).
int64_t worldTotal(int64_t n, int size, const char* op);

// A c10d reduce op checked against a dtype. PREMUL_SUM becomes a SUM of the
// inputs scaled by the op's factor (a double or a one-element tensor).
struct Reduction {
  goncclRedOp_t op = goncclSum;
  bool premul = false;
  double factor = 1.0;
  at::Tensor tensorFactor;  // defined if the factor is a tensor

  // For PREMUL_SUM: t scaled by the factor, in place if inPlace, else a new
  // tensor. Otherwise t itself.
  at::Tensor scaled(const at::Tensor& t, bool inPlace) const;
};

Reduction checkReduceOp(
    const c10d::ReduceOp& reduceOp, at::ScalarType dtype, const char* op);

// "torch.float32".
std::string dtypeName(at::ScalarType type);

}  // namespace gonccl
