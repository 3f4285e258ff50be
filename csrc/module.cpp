// module.cpp: the gonccl._C Python module.
//
// Importing it does not load libgonccl.so (nothing here links against it):
// the library is dlopen'ed when the first backend is created, or by version().
#include <torch/extension.h>

#include <pybind11/chrono.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "backend.hpp"
#include "cuda.hpp"
#include "hops.hpp"
#include "library.hpp"
#include "work.hpp"

namespace py = pybind11;

namespace gonccl {
void defineContract(py::module_& m);  // contract_module.cpp
}  // namespace gonccl

namespace {

// Records the thread Python runs signal handlers on (see GoncclWork::wait):
// every way of making a backend calls this, with the GIL held.
void recordSignalThread() {
  gonccl::setSignalThread(py::module_::import("threading")
                              .attr("main_thread")()
                              .attr("ident")
                              .cast<unsigned long>());
}

c10::intrusive_ptr<gonccl::GoncclBackend> createBackendWithOptions(
    c10d::Store& store,
    int rank,
    int size,
    const c10::intrusive_ptr<gonccl::GoncclOptions>& options,
    const std::string& libraryPath,
    bool deferred) {
  TORCH_CHECK_VALUE(options, "gonccl: options must not be None");
  // The store object is owned by Python; take a reference of our own.
  auto storeRef =
      c10::intrusive_ptr<c10d::Store>::unsafe_reclaim_from_nonowning(&store);
  // The backend keeps its own copy: the caller may reuse the object.
  auto own = c10::make_intrusive<gonccl::GoncclOptions>(*options);
  recordSignalThread();
  // Joining the communicator blocks until every rank has arrived.
  py::gil_scoped_release noGil;
  if (deferred) {
    return c10::make_intrusive<gonccl::GoncclBackend>(
        gonccl::GoncclBackend::Deferred{},
        storeRef,
        rank,
        size,
        own,
        libraryPath);
  }
  return c10::make_intrusive<gonccl::GoncclBackend>(
      storeRef, rank, size, own, libraryPath);
}

c10::intrusive_ptr<gonccl::GoncclBackend> createBackend(
    c10d::Store& store,
    int rank,
    int size,
    int64_t timeoutMs,
    const std::string& libraryPath,
    bool deferred) {
  return createBackendWithOptions(
      store,
      rank,
      size,
      c10::make_intrusive<gonccl::GoncclOptions>(
          std::chrono::milliseconds(timeoutMs)),
      libraryPath,
      deferred);
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

// The module's binding table: one declaration per Python name, long because
// it is the whole Python surface of the extension in one place.
PYBIND11_MODULE(_C, m) {
  m.doc() = "gonccl's c10d backend (C++); loads libgonccl.so on first use";
  // Registers the c10d Backend and Store types this module builds on.
  py::module_::import("torch.distributed");

  py::class_<
      gonccl::GoncclOptions,
      c10d::Backend::Options,
      c10::intrusive_ptr<gonccl::GoncclOptions>>(
      m,
      "GoncclOptions",
      "gonccl's process-group options, for pg_options of "
      "init_process_group, new_group and split_group: torch's (_timeout, "
      "group_name, global_ranks_in_group) plus the communicator's "
      "algorithm restriction (GONCCL_ALGO's syntax) and chunk_size (bytes); "
      "empty/0 keeps the environment's. Every rank must pass the same.")
      .def(
          py::init([](std::chrono::milliseconds timeout,
                      const std::string& algorithm,
                      int64_t chunkSize) {
            TORCH_CHECK_VALUE(
                timeout.count() > 0,
                "gonccl: GoncclOptions: timeout must be positive, got ",
                timeout.count(),
                " ms");
            TORCH_CHECK_VALUE(
                chunkSize == 0 || (chunkSize >= 4096 && chunkSize <= (1 << 30)),
                "gonccl: GoncclOptions: chunk_size must be 0 (the "
                "environment's) or 4096..1073741824 bytes, got ",
                chunkSize);
            auto o = c10::make_intrusive<gonccl::GoncclOptions>(timeout);
            o->algorithm = algorithm;
            o->chunk_size = chunkSize;
            return o;
          }),
          py::arg("timeout") = ::kBackendDefaultTimeout,
          py::arg("algorithm") = "",
          py::arg("chunk_size") = 0)
      .def_readwrite(
          "algorithm",
          &gonccl::GoncclOptions::algorithm,
          "The algorithms the cost model may pick, GONCCL_ALGO's syntax "
          "(e.g. 'allreduce:ring;broadcast:chain'); '' keeps GONCCL_ALGO.")
      .def_property(
          "chunk_size",
          [](const gonccl::GoncclOptions& o) { return o.chunk_size; },
          [](gonccl::GoncclOptions& o, int64_t v) {
            TORCH_CHECK_VALUE(
                v == 0 || (v >= 4096 && v <= (1 << 30)),
                "gonccl: GoncclOptions: chunk_size must be 0 (the "
                "environment's) or 4096..1073741824 bytes, got ",
                v);
            o.chunk_size = v;
          },
          "Bytes per pipelined chunk of ring and chain algorithms; 0 keeps "
          "GONCCL_CHUNKSIZE.")
      // torch 2.11-2.14's split_group deep-copies the parent's options when
      // none are given.
      .def(
          "__copy__",
          [](const gonccl::GoncclOptions& o) {
            return c10::make_intrusive<gonccl::GoncclOptions>(o);
          })
      .def(
          "__deepcopy__",
          [](const gonccl::GoncclOptions& o, const py::dict& /*memo*/) {
            return c10::make_intrusive<gonccl::GoncclOptions>(o);
          },
          py::arg("memo"))
      .def("__repr__", [](const gonccl::GoncclOptions& o) {
        return c10::str(
            "GoncclOptions(timeout=",
            o.timeout.count(),
            " ms, algorithm='",
            o.algorithm,
            "', chunk_size=",
            o.chunk_size,
            ", group_name='",
            o.group_name,
            "', global_ranks_in_group=[",
            c10::Join(", ", o.global_ranks_in_group),
            "])");
      });

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
          py::init(&createBackendWithOptions),
          py::arg("store"),
          py::arg("rank"),
          py::arg("size"),
          py::arg("options"),
          py::arg("library_path"),
          py::arg("deferred") = false,
          "The same with GoncclOptions (whose timeout is the group's).")
      .def(
          "perform_nocolor_split",
          [](gonccl::GoncclBackend& /*self*/, const c10::Device& /*device*/) {},
          py::arg("device"),
          "Called by new_group on the ranks left out of a group split from "
          "this one (when the default group has a bound device). A no-op: "
          "gonccl builds a subgroup's communicator among its members only.")
      // torch binds these three on c10d::Backend only in newer releases: on
      // 2.11 its Backend has none of them (ProcessGroupGloo has `options`),
      // yet 2.11's split_group reads parent_backend.options. Bound here they
      // are the same virtual calls on every supported torch.
      .def_property_readonly(
          "options",
          [](gonccl::GoncclBackend& self) {
            return c10::static_intrusive_pointer_cast<gonccl::GoncclOptions>(
                self.getBackendOptions());
          },
          "A copy of the group's GoncclOptions, with its current timeout.")
      .def(
          "get_error",
          &gonccl::GoncclBackend::getError,
          py::call_guard<py::gil_scoped_release>(),
          "The kind of the first failure that broke the communicator "
          "(ErrorType.SUCCESS while none has).")
      .def(
          "_enable_collectives_timing",
          &gonccl::GoncclBackend::enableCollectivesTiming,
          py::call_guard<py::gil_scoped_release>(),
          "Ops issued from now on measure their duration (Work._get_duration).")
      .def(
          "_set_sequence_number_for_group",
          [](gonccl::GoncclBackend& /*self*/) {},
          "Called by torch 2.11-2.13's split_group on the new group (c10d's "
          "Backend raises there). A no-op: every rank numbers a gonccl "
          "group's ops from 0 when the group is made.");

  gonccl::defineContract(m);
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
      "_hops",
      [](bool reset) {
        py::gil_scoped_release noGil;
        return gonccl::hops::stats(reset);
      },
      py::arg("reset") = false,
      "Per-hop timing of this process (GONCCL_DEBUG_HOPS=1): (hop, count, "
      "total ns) for C++'s hops, then Go's; reset zeroes them after reading.");
  m.def(
      "header_version",
      []() { return GONCCL_VERSION_CODE; },
      "GONCCL_VERSION_CODE of the gonccl.h this module was built with.");
}
