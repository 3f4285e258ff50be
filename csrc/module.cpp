// module.cpp: the gonccl._C Python module.
//
// Importing it does not load libgonccl.so (nothing here links against it):
// the library is dlopen'ed when the first backend is created, or by version().
#include <torch/extension.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend.hpp"
#include "cuda.hpp"
#include "library.hpp"

namespace py = pybind11;

namespace {

c10::intrusive_ptr<gonccl::GoncclBackend> createBackend(
    c10d::Store& store,
    int rank,
    int size,
    int64_t timeoutMs,
    const std::string& libraryPath,
    bool deferred) {
  // The store object is owned by Python; take a reference of our own.
  auto storeRef =
      c10::intrusive_ptr<c10d::Store>::unsafe_reclaim_from_nonowning(&store);
  // Joining the communicator blocks until every rank has arrived.
  py::gil_scoped_release noGil;
  if (deferred) {
    return c10::make_intrusive<gonccl::GoncclBackend>(
        gonccl::GoncclBackend::Deferred{},
        storeRef,
        rank,
        size,
        std::chrono::milliseconds(timeoutMs),
        libraryPath);
  }
  return c10::make_intrusive<gonccl::GoncclBackend>(
      storeRef, rank, size, std::chrono::milliseconds(timeoutMs), libraryPath);
}

int libraryVersion(const std::string& libraryPath) {
  const gonccl::Library& L = gonccl::loadLibrary(libraryPath);
  int version = 0;
  goncclResult_t rc = L.getVersion(&version);
  TORCH_CHECK(
      rc == goncclSuccess,
      "gonccl: goncclGetVersion failed: ",
      gonccl::errorString(rc, nullptr));
  return version;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "gonccl's c10d backend (C++); loads libgonccl.so on first use";
  // Registers the c10d Backend and Store types this module builds on.
  py::module_::import("torch.distributed");

  py::class_<
      gonccl::GoncclBackend,
      c10d::Backend,
      c10::intrusive_ptr<gonccl::GoncclBackend>>(m, "GoncclBackend")
      .def(
          py::init(&createBackend),
          py::arg("store"),
          py::arg("rank"),
          py::arg("size"),
          py::arg("timeout_ms"),
          py::arg("library_path"),
          py::arg("deferred") = false,
          "Joins a gonccl communicator (blocks until all ranks have joined); "
          "with deferred, makes none until reconfigure() is called.")
      .def_property_readonly(
          "epoch",
          &gonccl::GoncclBackend::epoch,
          "The communicator's generation (shrink and reconfigure add one).")
      .def_property_readonly(
          "stale_frames",
          &gonccl::GoncclBackend::staleFrames,
          "Frames of older generations the communicator has dropped.")
      .def(
          "perform_nocolor_split",
          [](gonccl::GoncclBackend& /*self*/, const c10::Device& /*device*/) {},
          py::arg("device"),
          "Called by new_group on the ranks left out of a group split from "
          "this one (when the default group has a bound device). A no-op: "
          "gonccl builds a subgroup's communicator among its members only.");

  m.def(
      "library_version",
      &libraryVersion,
      py::arg("library_path"),
      "Loads libgonccl.so (starting the Go runtime) and returns "
      "goncclGetVersion's code: major*10000 + minor*100 + patch.");
  m.def(
      "cuda_support",
      &gonccl::cuda::support,
      "True if this extension was built with CUDA support (against a CUDA "
      "torch): collectives then take CUDA tensors too. A build-time fact; "
      "whether a GPU is present is torch.cuda.is_available().");
  m.def(
      "_op_device",
      [](const std::string& op,
         const std::vector<c10::Device>& devices,
         std::optional<bool> cudaBuilt) {
        return gonccl::cuda::opDevice(
            devices, op.c_str(), cudaBuilt.value_or(gonccl::cuda::support()));
      },
      py::arg("op"),
      py::arg("devices"),
      py::arg("cuda_built") = py::none(),
      "For tests: the device an op on tensors of these devices runs on, or "
      "the error the backend raises for them (cuda_built overrides the "
      "build's CUDA support).");
  m.def(
      "header_version",
      []() { return GONCCL_VERSION_CODE; },
      "GONCCL_VERSION_CODE of the gonccl.h this module was built with.");
}
