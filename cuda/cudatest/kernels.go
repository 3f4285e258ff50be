package cudatest

/*
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*corruptFn)(const char*);

static int corruptKernel(const char* lib, const char* name) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return -2;
  corruptFn f = (corruptFn)dlsym(h, "fakecudaCorruptKernel");
  if (f == NULL) return -3;
  return f(name);
}
static void copyTo(uintptr_t dst, const void* src, size_t n) { memcpy((void*)dst, src, n); }
static void copyFrom(void* dst, uintptr_t src, size_t n) { memcpy(dst, (const void*)src, n); }
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// Write copies b to device memory p directly (no stream): the fake's device memory is
// host memory.
func (f *Fake) Write(p uintptr, b []byte) { Poke(p, b) }

// Read returns n bytes of device memory p, read directly (no stream).
func (f *Fake) Read(p uintptr, n int) []byte { return Peek(p, n) }

// Poke copies b to host-addressable memory at p (the fake's device memory, or pinned
// host memory).
func Poke(p uintptr, b []byte) {
	if len(b) > 0 {
		C.copyTo(C.uintptr_t(p), unsafe.Pointer(&b[0]), C.size_t(len(b)))
	}
}

// Peek returns a copy of n bytes of host-addressable memory at p.
func Peek(p uintptr, n int) []byte {
	b := make([]byte, n)
	if n > 0 {
		C.copyFrom(unsafe.Pointer(&b[0]), C.uintptr_t(p), C.size_t(n))
	}
	return b
}

// CorruptKernel makes the fake at path run a deliberately wrong implementation of the
// kernel called name (it misses the last element) from now on; "" restores them all.
func CorruptKernel(path, name string) error {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var cn *C.char
	if name != "" {
		cn = C.CString(name)
		defer C.free(unsafe.Pointer(cn))
	}
	if r := C.corruptKernel(cp, cn); r != 0 {
		return fmt.Errorf("fakecudaCorruptKernel(%q) in %s: %d", name, path, int(r))
	}
	return nil
}
