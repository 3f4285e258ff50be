// gil.hpp: releasing the GIL around calls that block on other ranks.
#pragma once

#include <Python.h>

namespace gonccl {

// Releases the GIL for its scope if this thread holds it. Closing the
// communicator waits for the completion thread, which may need the GIL to run
// a Python callback attached to a future; creating one waits for other ranks.
class GilRelease {
 public:
  GilRelease() {
    if (Py_IsInitialized() && PyGILState_Check()) {
      state_ = PyEval_SaveThread();
    }
  }
  ~GilRelease() {
    if (state_ != nullptr) {
      PyEval_RestoreThread(state_);
    }
  }
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

}  // namespace gonccl
