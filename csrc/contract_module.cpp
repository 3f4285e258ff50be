// contract_module.cpp: gonccl._C's bindings for what torch's contract has in
// C++ only (suspend, resume, getMemoryStats) and for the tests of the rest
// (how many peers a rank is connected to). Called from module.cpp once the
// GoncclBackend class is bound.
#include <torch/extension.h>

#include <string>
#include <unordered_map>

#include "backend.hpp"

namespace py = pybind11;

namespace gonccl {

void defineContract(py::module_& m) {
  m.def(
      "_suspend",
      [](GoncclBackend& b) { b.suspendComm(); },
      py::arg("backend"),
      "Backend::suspend: waits for the ops issued so far, then frees the "
      "communicator's memory; later ops fail until _resume.");
  m.def(
      "_resume",
      [](GoncclBackend& b) { b.resumeComm(); },
      py::arg("backend"),
      "Backend::resume: takes ops again after _suspend.");
  m.def(
      "_memory_stats",
      [](GoncclBackend& b) { return b.memoryStats(); },
      py::arg("backend"),
      "Backend::getMemoryStats: bytes the communicator holds, by kind.");
  m.def(
      "_connected_peers",
      [](GoncclBackend& b) { return b.connectedPeers(); },
      py::arg("backend"),
      "How many peers this rank has a connection to.");
}

}  // namespace gonccl
