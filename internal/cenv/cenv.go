// Package cenv reads environment variables through the C library's getenv.
//
// The Go runtime copies the environment once, at process start, so a variable that a
// host program (Python's os.environ, a C program's setenv) sets after libgonccl.so was
// loaded is invisible to os.Getenv. Every GONCCL_* setting is therefore read here.
// This package must stay tiny: it is the only cgo in the configuration path.
package cenv

/*
#include <stdlib.h>
*/
import "C"

import "unsafe"

// Lookup returns the value of the environment variable name as the C library sees it
// now, and whether it is set.
func Lookup(name string) (string, bool) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	v := C.getenv(cname)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}
