// window.cpp: GoncclWindow (window.hpp) and GoncclBackend::new_window.
#include "window.hpp"

#if GONCCL_HAS_WINDOW

#include <c10/core/StorageImpl.h>
#include <c10/util/Exception.h>

#include "backend.hpp"
#include "checks.hpp"
#include "cuda.hpp"
#include "gil.hpp"
#include "library.hpp"

namespace gonccl {
namespace {

// Lets go of a window memory hold when the tensor (or storage) over it dies.
void releaseHold(void* ctx) {
  auto* hold = static_cast<goncclWinHold_t*>(ctx);
  if (libraryLoaded() && !isForkedChild()) {
    lib().winHoldRelease(*hold);
  }
  delete hold;
}

// A CPU DataPtr over window memory that keeps it mapped while it lives.
at::DataPtr heldPtr(void* ptr, goncclWinHold_t hold) {
  return at::DataPtr(
      ptr, new goncclWinHold_t(hold), &releaseHold, at::Device(at::kCPU));
}

// A window takes CPU tensors, and CUDA tensors (whose memory the ranks of a
// host map through CUDA IPC).
void checkDevice(const at::Tensor& t, const char* op) {
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    fail<c10::ValueError>(
        op,
        "gonccl windows hold CPU or CUDA tensors; got a tensor on ",
        t.device());
  }
}

}  // namespace

c10::intrusive_ptr<c10d::Window> GoncclBackend::new_window(
    const std::optional<at::Tensor>& tensor) {
  constexpr const char* op = "new_window";
  if (tensor) {
    checkDevice(*tensor, op);
  }
  goncclWindow_t win = nullptr;
  goncclComm_t comm = liveComm(op);
  goncclResult_t rc;
  {
    GilRelease noGil;
    rc = lib().winCreate(comm, &win);
  }
  if (rc != goncclSuccess) {
    fail<c10::DistBackendError>(
        op, errorString(rc, lib().getLastError(comm)), rankNote());
  }
  auto window = c10::make_intrusive<GoncclWindow>(
      c10::intrusive_ptr<GoncclBackend>::unsafe_reclaim_from_nonowning(this),
      win);
  if (tensor) {
    window->tensor_register(*tensor, true);
  }
  return window;
}

GoncclWindow::GoncclWindow(
    c10::intrusive_ptr<GoncclBackend> backend, goncclWindow_t win)
    : backend_(std::move(backend)), win_(win) {}

GoncclWindow::~GoncclWindow() {
  // Local: a window dropped on one rank does not wait for the others.
  if (win_ != nullptr && libraryLoaded() && !isForkedChild()) {
    lib().winFree(win_);
  }
}

void GoncclWindow::check(goncclResult_t rc, const char* op) const {
  if (rc != goncclSuccess) {
    const std::string msg = errorString(rc, lib().getLastError(nullptr));
    if (rc == goncclInvalidArgument || rc == goncclNotSupported ||
        rc == goncclMismatch) {
      fail<c10::ValueError>(op, msg);
    }
    fail<c10::DistBackendError>(op, msg);
  }
}

void GoncclWindow::checkRank(int64_t rank, const char* op) const {
  if (rank < 0 || rank >= backend_->getSize()) {
    fail<c10::ValueError>(
        op,
        "rank ",
        rank,
        " is out of range for a group of ",
        backend_->getSize(),
        " ranks");
  }
}

void GoncclWindow::tensor_register(const at::Tensor& tensor, bool owning) {
  constexpr const char* op = "tensor_register";
  checkDevice(tensor, op);
  const goncclDataType_t type = checkTensor(tensor, op);
  if (registered_) {
    fail<c10::ValueError>(
        op,
        "this window has a tensor registered already; call "
        "tensor_deregister first");
  }
  if (tensor.is_cuda()) {
    registerCuda(tensor, type, owning);
    return;
  }
  // The whole storage moves into window memory, so the tensor must be all of
  // it.
  c10::StorageImpl* storage = tensor.storage().unsafeGetStorageImpl();
  const size_t bytes = static_cast<size_t>(tensor.numel()) *
                       static_cast<size_t>(tensor.element_size());
  if (tensor.storage_offset() != 0 || storage->nbytes() != bytes) {
    fail<c10::ValueError>(
        op,
        "the tensor must span its whole storage (its memory moves into the "
        "window); this one is a view of ",
        bytes,
        " bytes at element offset ",
        tensor.storage_offset(),
        " into a storage of ",
        storage->nbytes(),
        " bytes: register tensor.clone() instead");
  }
  // The current contents go into the window before any peer may put there.
  const void* init = tensor.numel() > 0 ? tensor.const_data_ptr() : nullptr;
  {
    GilRelease noGil;
    check(
        lib().winRegister(
            win_, init, static_cast<size_t>(tensor.numel()), type),
        op);
  }
  registered_ = true;
  if (tensor.numel() > 0) {
    void* ptr = nullptr;
    size_t have = 0;
    goncclWinHold_t hold = 0;
    check(
        lib().winMemory(
            win_, static_cast<int>(backend_->getRank()), &ptr, &have, &hold),
        op);
    TORCH_INTERNAL_ASSERT(have == bytes, "window memory of the wrong size");
    storage->set_data_ptr_noswap(heldPtr(ptr, hold));
  }
  if (owning) {
    owned_ = tensor;
  }
}

void GoncclWindow::registerCuda(
    const at::Tensor& tensor, goncclDataType_t type, bool owning) {
  constexpr const char* op = "tensor_register";
  if (tensor.numel() == 0) {
    fail<c10::ValueError>(
        op, "a window over CUDA memory needs a non-empty tensor");
  }
  // The tensor's memory is the window: the peers map the allocation holding
  // it. What the caller queued to fill it comes first.
  cuda::currentStream(tensor.device().index()).synchronize();
  {
    GilRelease noGil;
    check(
        lib().winRegister(
            win_, tensor.data_ptr(), static_cast<size_t>(tensor.numel()), type),
        op);
  }
  registered_ = true;
  device_ = tensor.device();
  if (owning) {
    owned_ = tensor;
  }
}

void GoncclWindow::tensor_deregister() {
  constexpr const char* op = "tensor_deregister";
  if (!registered_) {
    fail<c10::ValueError>(op, "this window has no tensor registered");
  }
  registered_ = false;
  GilRelease noGil;
  // Unmaps the peers' memory everywhere before the barrier: then the tensor's
  // memory may go back to torch's allocator.
  check(lib().winDeregister(win_), op);
  owned_.reset();
  device_ = c10::Device(c10::kCPU);
}

c10::intrusive_ptr<c10d::Work> GoncclWindow::finish(
    c10::intrusive_ptr<c10d::Work> work, bool asyncOp) const {
  if (!asyncOp) {
    work->wait();
  }
  return work;
}

c10::intrusive_ptr<c10d::Work> GoncclWindow::put(
    const at::Tensor& tensor,
    int64_t dstRank,
    int64_t targetOffsetNelems,
    bool asyncOp,
    const c10d::PutOptions& opts) {
  constexpr OpName op = GONCCL_OP("put");
  checkDevice(tensor, op);
  const goncclDataType_t type = checkTensor(tensor, op);
  if (registered_ && tensor.is_cuda() != device_.is_cuda()) {
    fail<c10::ValueError>(
        op,
        "this window holds ",
        device_.is_cuda() ? "CUDA" : "CPU",
        " memory; put a tensor on the ",
        device_.is_cuda() ? "GPU" : "CPU",
        " (got one on ",
        tensor.device(),
        ")");
  }
  checkRank(dstRank, op);
  if (targetOffsetNelems < 0) {
    fail<c10::ValueError>(op, "negative target offset ", targetOffsetNelems);
  }
  // Checked here too (core would refuse), so that Python sees ValueError and
  // TypeError, as for other bad input, rather than a backend error.
  size_t count = 0;
  goncclDataType_t peerType = type;
  check(
      lib().winGetInfo(win_, static_cast<int>(dstRank), &count, &peerType), op);
  if (peerType != type) {
    fail<c10::TypeError>(
        op,
        "rank ",
        dstRank,
        "'s window holds ",
        scalarTypeOf(peerType),
        " but the tensor is ",
        tensor.scalar_type());
  }
  const auto n = static_cast<uint64_t>(tensor.numel());
  const auto offset = static_cast<uint64_t>(targetOffsetNelems);
  if (offset > count || n > count - offset) {
    fail<c10::ValueError>(
        op,
        "elements [",
        offset,
        ", ",
        offset + n,
        ") do not fit in rank ",
        dstRank,
        "'s window of ",
        count,
        " elements");
  }
  GoncclBackend::CallTimeout scope(opts.timeout);
  auto work = backend_->issue(
      {c10d::OpType::SEND, op, {tensor}, {tensor}},
      [&](GoncclBackend::Parts& p) {
        if (p.stream != nullptr) {
          // Queued on the gonccl stream, after the caller's current stream:
          // complete once queued (the Work orders the caller's stream after
          // it), and in the peer's window by the next signal.
          return lib().putOnStream(
              tensor.const_data_ptr(),
              static_cast<size_t>(tensor.numel()),
              type,
              static_cast<int>(dstRank),
              static_cast<size_t>(targetOffsetNelems),
              win_,
              p.stream);
        }
        return p.add(lib().putAsync(
            tensor.const_data_ptr(),
            static_cast<size_t>(tensor.numel()),
            type,
            static_cast<int>(dstRank),
            static_cast<size_t>(targetOffsetNelems),
            win_,
            p.next()));
      });
  return finish(work, asyncOp);
}

at::Tensor GoncclWindow::map_remote_tensor(int64_t rank) {
  constexpr const char* op = "map_remote_tensor";
  checkRank(rank, op);
  size_t count = 0;
  goncclDataType_t type = goncclFloat32;
  check(lib().winGetInfo(win_, static_cast<int>(rank), &count, &type), op);
  void* ptr = nullptr;
  size_t bytes = 0;
  goncclWinHold_t hold = 0;
  check(lib().winMemory(win_, static_cast<int>(rank), &ptr, &bytes, &hold), op);
  const auto options = at::TensorOptions().dtype(scalarTypeOf(type));
  if (count == 0) {
    lib().winHoldRelease(hold);
    return at::empty({0}, options);
  }
  if (device_.is_cuda()) {
    // The peer's memory as mapped here, until tensor_deregister.
    return at::from_blob(
        ptr,
        {static_cast<int64_t>(count)},
        [hold](void*) {
          if (libraryLoaded() && !isForkedChild()) {
            lib().winHoldRelease(hold);
          }
        },
        options.device(device_),
        device_);  // this rank's GPU, which reaches the mapping (peer access)
  }
  at::DataPtr data = heldPtr(ptr, hold);
  at::Storage storage(
      at::Storage::use_byte_size_t(),
      bytes,
      std::move(data),
      /*allocator=*/nullptr,
      /*resizable=*/false);
  return at::empty({0}, options)
      .set_(storage, 0, {static_cast<int64_t>(count)}, {1});
}

c10::intrusive_ptr<c10d::Work> GoncclWindow::signal(
    int64_t peerRank, bool asyncOp, const c10d::SignalOptions& opts) {
  constexpr OpName op = GONCCL_OP("signal");
  checkRank(peerRank, op);
  GoncclBackend::CallTimeout scope(opts.timeout);
  auto work = backend_->issue(
      {c10d::OpType::SEND, op, {}, {}}, [&](GoncclBackend::Parts& p) {
        return p.add(
            lib().signalAsync(static_cast<int>(peerRank), win_, p.next()));
      });
  return finish(work, asyncOp);
}

c10::intrusive_ptr<c10d::Work> GoncclWindow::wait_signal(
    int64_t peerRank, bool asyncOp, const c10d::WaitSignalOptions& opts) {
  constexpr OpName op = GONCCL_OP("wait_signal");
  checkRank(peerRank, op);
  GoncclBackend::CallTimeout scope(opts.timeout);
  auto work = backend_->issue(
      {c10d::OpType::RECV, op, {}, {}}, [&](GoncclBackend::Parts& p) {
        return p.add(
            lib().waitSignalAsync(static_cast<int>(peerRank), win_, p.next()));
      });
  return finish(work, asyncOp);
}

c10d::WindowAttr GoncclWindow::get_attr(int64_t peerRank) {
  constexpr const char* op = "get_attr";
  checkRank(peerRank, op);
  goncclWinAccess_t access = goncclWinUnified;
  check(lib().winGetAttr(win_, static_cast<int>(peerRank), &access), op);
  c10d::WindowAttr attr;
  attr.access_type = access == goncclWinUnified
                         ? c10d::WindowAccessType::UNIFIED
                         : c10d::WindowAccessType::SEPARATE;
  return attr;
}

}  // namespace gonccl

#endif  // GONCCL_HAS_WINDOW
