// checks.hpp: validation of what torch hands the backend, before anything
// reaches Go. Every failure throws with a message that starts with
// "gonccl: <op>: " and names the problem:
//   unsupported dtype, reduce op that has no meaning
//   for the dtype (BXOR on float, MAX on complex, any
//   reduction of float8)                               -> TypeError
//   sparse / not CPU or CUDA / CUDA in a build without
//   CUDA / non-contiguous / wrong count /
//   size mismatch / bad root / unsupported reduce op   -> ValueError
//
// core validates much of this again (capi answers goncclInvalidArgument, which
// reaches Python as a DistBackendError from the op). The checks stay here
// because Python code relies on what they give: the TypeError/ValueError above
// (tests/workers/bad_input_worker.py asserts the types), raised on the calling
// rank before any request is queued, so its peers are not left waiting in a
// collective and the group stays usable; and what core never sees (c10d's
// PREMUL_SUM factor, root tensors, list lengths, split sizes).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include "errors.hpp"
#include "gonccl.h"

namespace gonccl {

// A dense (and, if contiguous, contiguous) CPU or CUDA tensor (CUDA only in a
// build with CUDA support) of a supported dtype; returns its dtype. That all of
// an op's tensors share one device is checked when it is issued.
goncclDataType_t checkTensor(
    const at::Tensor& t, const char* op, bool contiguous = true);

// The torch dtype of a gonccl data type that checkTensor returns.
at::ScalarType scalarTypeOf(goncclDataType_t type);

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

// t.numel() == expected, else a ValueError naming both and the tensor (what:
// the pieces of its description, formatted only when throwing).
template <typename... What>
void checkNumel(
    const at::Tensor& t,
    int64_t expected,
    const char* op,
    const What&... what) {
  if (t.numel() != expected) {
    fail<c10::ValueError>(
        op, what..., " has ", t.numel(), " elements, expected ", expected);
  }
}

// 0 <= root < size.
void checkRoot(int64_t root, int size, const char* op);

// c10d's root tensor index: gonccl takes one tensor per rank, so it is 0.
void checkRootTensor(int64_t rootTensor, const char* op);

// Every tensor of a list against the reference: supported, same dtype, n
// elements (contiguous or not: the caller stages them).
void checkList(
    const std::vector<at::Tensor>& ts,
    const at::Tensor& ref,
    int64_t n,
    const char* op,
    const char* what);

// The one list of lists that c10d passes (what: "output" for a list of output
// tensors).
const std::vector<at::Tensor>& oneList(
    const std::vector<std::vector<at::Tensor>>& lists,
    const char* op,
    const char* what);

// A list only the root takes (gather's outputs, scatter's inputs): on the root
// its one list, on the other ranks null (they must pass no list).
const std::vector<at::Tensor>* rootList(
    const std::vector<std::vector<at::Tensor>>& lists,
    int root,
    int rank,
    const char* op,
    const char* what);

// Element counts and offsets of one side (what: "input" or "output") of
// all_to_all_single: split sizes count rows of dim 0 (equal splits if empty).
void splitCounts(
    const at::Tensor& t,
    const std::vector<int64_t>& splits,
    int size,
    const char* op,
    const char* what,
    std::vector<size_t>& counts,
    std::vector<size_t>& displs);

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
