// window.hpp: one-sided windows (c10d::Window, torch 2.15) on CPU tensors,
// and on CUDA tensors of ranks on one host.
//
// A registered tensor's storage moves into gonccl's shared memory (its bytes
// are copied there and the storage then points there: every view of it stays
// valid and sees what peers put). Peers on this host map that memory
// (UNIFIED: put is a copy into it, map_remote_tensor a tensor over it); peers
// on other hosts reach it through messages on the point-to-point connection
// (SEPARATE: map_remote_tensor refuses). core/window.go does the work.
//
// A CUDA tensor is registered as it is (its memory stays torch's): the C ABI
// maps every rank's through CUDA IPC (capi/window.go, cuda/window.go); put
// queues a device copy on the gonccl stream after the caller's current stream,
// signal goes out once the puts have landed, and map_remote_tensor returns a
// CUDA tensor over the peer's memory as mapped here, valid until
// tensor_deregister.
#pragma once

#include "torch_compat.hpp"

#if GONCCL_HAS_WINDOW

#include <optional>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Window.hpp>

#include "gonccl.h"

namespace gonccl {

class GoncclBackend;

class GoncclWindow : public c10d::Window {
 public:
  // Takes win (made by goncclWinCreate on backend's communicator).
  GoncclWindow(c10::intrusive_ptr<GoncclBackend> backend, goncclWindow_t win);
  ~GoncclWindow() override;
  GoncclWindow(const GoncclWindow&) = delete;
  GoncclWindow& operator=(const GoncclWindow&) = delete;

  void tensor_register(const at::Tensor& tensor, bool owning = true) override;
  void tensor_deregister() override;
  c10::intrusive_ptr<c10d::Work> put(
      const at::Tensor& tensor,
      int64_t dstRank,
      int64_t targetOffsetNelems,
      bool asyncOp,
      const c10d::PutOptions& opts = c10d::PutOptions()) override;
  at::Tensor map_remote_tensor(int64_t rank) override;
  c10::intrusive_ptr<c10d::Work> signal(
      int64_t peerRank,
      bool asyncOp,
      const c10d::SignalOptions& opts = c10d::SignalOptions()) override;
  c10::intrusive_ptr<c10d::Work> wait_signal(
      int64_t peerRank,
      bool asyncOp,
      const c10d::WaitSignalOptions& opts = c10d::WaitSignalOptions()) override;
  c10d::WindowAttr get_attr(int64_t peerRank) override;

 private:
  // Throws RuntimeError "gonccl: <op>: <Go's message>" unless rc is success.
  void check(goncclResult_t rc, const char* op) const;
  void checkRank(int64_t rank, const char* op) const;
  // tensor_register of a CUDA tensor: its memory is the window.
  void registerCuda(
      const at::Tensor& tensor, goncclDataType_t type, bool owning);
  // Waits for work unless asyncOp; returns it.
  c10::intrusive_ptr<c10d::Work> finish(
      c10::intrusive_ptr<c10d::Work> work, bool asyncOp) const;

  c10::intrusive_ptr<GoncclBackend> backend_;
  goncclWindow_t win_;
  bool registered_ = false;
  // The registered tensor's device: CPU, or the CUDA device of a window over
  // device memory.
  c10::Device device_{c10::kCPU};
  std::optional<at::Tensor> owned_;  // the registered tensor, when owning
};

}  // namespace gonccl

#endif  // GONCCL_HAS_WINDOW
