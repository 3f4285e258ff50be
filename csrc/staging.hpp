// staging.hpp: the buffers an op runs on where the tensors c10d hands it
// cannot be used in place (not contiguous, or a list that is not one buffer),
// and the copies back into those tensors once the op has finished.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

#include "checks.hpp"

namespace gonccl {

// Collects one op's staging tensors (keepAlive: the Work holds them until the
// op has finished) and its copy-outs (postComplete). An op whose tensors can
// be used as they are stages nothing and allocates nothing here.
class Staging {
 public:
  // t itself if it is contiguous (or not strided: checkTensor rejects that),
  // else a contiguous copy; if written, t gets the copy back afterwards.
  at::Tensor dense(const at::Tensor& t, bool written);

  // For PREMUL_SUM: a scaled copy of t (kept); otherwise t itself.
  at::Tensor scaled(const Reduction& r, const at::Tensor& t);

  // The tensors' elements, one after the other, in a new 1-D tensor of total
  // elements (kept).
  at::Tensor flat(const std::vector<at::Tensor>& ts, int64_t total);

  // After the op, consecutive pieces of flat are copied into ts.
  void copyOut(const at::Tensor& flat, const std::vector<at::Tensor>& ts);

  // A new 1-D tensor of total elements (kept), copied out into ts.
  at::Tensor flatOut(
      const std::vector<at::Tensor>& ts,
      int64_t total,
      const at::TensorOptions& options);

  // Where an op reads ts (n elements each, total in all) as one buffer: the
  // tensors' own memory if they are consecutive pieces of one buffer and r
  // scales nothing, else a flat copy, scaled by r.
  const void* readList(
      const std::vector<at::Tensor>& ts,
      int64_t n,
      int64_t total,
      const Reduction& r = Reduction());

  // Where an op writes ts (n elements each, total in all) as one buffer: the
  // tensors' own memory if they are consecutive pieces of one buffer, else a
  // flatOut like options.
  void* writeList(
      const std::vector<at::Tensor>& ts,
      int64_t n,
      int64_t total,
      const at::TensorOptions& options);

  // Keeps t alive (and, for CUDA, known to the op's stream) until the op has
  // finished.
  void keep(const at::Tensor& t);

  // What the op's Work holds: the staging tensors, and the copy-outs to run
  // when it has finished (null if there are none). Called once, last.
  std::vector<at::Tensor> keepAlive() {
    return std::move(keepAlive_);
  }
  std::function<void()> postComplete();

 private:
  std::vector<at::Tensor> keepAlive_;
  // (flat, tensors): consecutive pieces of flat go into the tensors.
  std::vector<std::pair<at::Tensor, std::vector<at::Tensor>>> unflatten_;
  // (tensor, its contiguous copy): the copy goes back into the tensor.
  std::vector<std::pair<at::Tensor, at::Tensor>> copyBack_;
};

}  // namespace gonccl
