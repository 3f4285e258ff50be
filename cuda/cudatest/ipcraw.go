package cudatest

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef struct { char reserved[64]; } rawIpcHandle;

static int rawIpcOpen(const char* path, const void* h, unsigned flags, unsigned long long* out) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) return -1;
  int (*open)(unsigned long long*, rawIpcHandle, unsigned) =
      (int (*)(unsigned long long*, rawIpcHandle, unsigned))dlsym(lib, "cuIpcOpenMemHandle_v2");
  if (open == NULL) return -2;
  rawIpcHandle handle;
  memcpy(&handle, h, sizeof handle);
  return open(out, handle, flags);
}
*/
import "C"

import "unsafe"

// IpcOpenRaw calls the fake driver at path's cuIpcOpenMemHandle with any flags (the
// driver package always passes CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) and returns the
// CUresult (-1, -2: the library or entry point was not found). A context must be
// current on the calling thread.
func IpcOpenRaw(path string, h [64]byte, flags uint) (uintptr, int) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var p C.ulonglong
	r := C.rawIpcOpen(cp, unsafe.Pointer(&h[0]), C.uint(flags), &p)
	return uintptr(p), int(r)
}
