#include "staging.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

namespace gonccl {
namespace {

// True if the tensors are consecutive n-element pieces of one buffer, in
// order, so that a collective can read or write all of them at once.
bool consecutive(const std::vector<at::Tensor>& ts, int64_t n) {
  if (ts.empty()) {
    return false;
  }
  const auto* base = static_cast<const char*>(ts[0].data_ptr());
  const size_t pieceBytes = n * ts[0].element_size();
  for (size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].numel() != n || !ts[i].is_contiguous() ||
        !ts[i].storage().is_alias_of(ts[0].storage()) ||
        static_cast<const char*>(ts[i].data_ptr()) != base + i * pieceBytes) {
      return false;
    }
  }
  return true;
}

// Copies consecutive pieces of flat into the tensors (the inverse of
// Staging::flat).
void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace

at::Tensor Staging::dense(const at::Tensor& t, bool written) {
  if (t.layout() != at::kStrided || t.is_contiguous()) {
    return t;
  }
  at::NoGradGuard noGrad;
  at::Tensor copy = t.contiguous();
  keep(copy);
  if (written) {
    copyBack_.emplace_back(t, copy);
  }
  return copy;
}

at::Tensor Staging::scaled(const Reduction& r, const at::Tensor& t) {
  if (!r.premul) {
    return t;
  }
  at::Tensor copy = r.scaled(t, /*inPlace=*/false);
  keep(copy);
  return copy;
}

at::Tensor Staging::flat(const std::vector<at::Tensor>& ts, int64_t total) {
  at::NoGradGuard noGrad;
  at::Tensor flat = at::empty({total}, ts[0].options());
  int64_t offset = 0;
  for (const at::Tensor& t : ts) {
    flat.narrow(0, offset, t.numel()).copy_(t.reshape({-1}));
    offset += t.numel();
  }
  keep(flat);
  return flat;
}

at::Tensor Staging::flatOut(
    const std::vector<at::Tensor>& ts,
    int64_t total,
    const at::TensorOptions& options) {
  at::Tensor flat = at::empty({total}, options);
  keep(flat);
  copyOut(flat, ts);
  return flat;
}

void Staging::copyOut(
    const at::Tensor& flat, const std::vector<at::Tensor>& ts) {
  unflatten_.emplace_back(flat, ts);
}

const void* Staging::readList(
    const std::vector<at::Tensor>& ts,
    int64_t n,
    int64_t total,
    const Reduction& r) {
  if (!r.premul && consecutive(ts, n)) {
    return ts[0].data_ptr();
  }
  return r.scaled(flat(ts, total), /*inPlace=*/true).data_ptr();
}

void* Staging::writeList(
    const std::vector<at::Tensor>& ts,
    int64_t n,
    int64_t total,
    const at::TensorOptions& options) {
  if (consecutive(ts, n)) {
    return ts[0].data_ptr();
  }
  return flatOut(ts, total, options).data_ptr();
}

void Staging::keep(const at::Tensor& t) {
  if (keepAlive_.empty()) {
    keepAlive_.reserve(4);
  }
  keepAlive_.push_back(t);
}

std::function<void()> Staging::postComplete() {
  if (unflatten_.empty() && copyBack_.empty()) {
    return nullptr;
  }
  return
      [unflattens = std::move(unflatten_), copyBacks = std::move(copyBack_)]() {
        for (const auto& [flat, ts] : unflattens) {
          unflatten(flat, ts);
        }
        for (const auto& [t, copy] : copyBacks) {
          t.copy_(copy);
        }
      };
}

}  // namespace gonccl
