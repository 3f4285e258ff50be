// Package cenv reads environment variables through the C library's getenv.
//
// The Go runtime copies the environment once, at process start, so a variable that a
// host program (Python's os.environ, a C program's setenv) sets after libgonccl.so was
// loaded is invisible to os.Getenv. Every GONCCL_* setting is therefore read here.
// This package must stay tiny: it is the only cgo in the configuration path.
package cenv

/*
#include <stdlib.h>

extern char **environ;
*/
import "C"

import (
	"strings"
	"unsafe"
)

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

// Names returns the name of every environment variable, as the C library sees the
// environment now, that starts with prefix.
func Names(prefix string) []string {
	var names []string
	for p := C.environ; p != nil && *p != nil; p = (**C.char)(unsafe.Add(unsafe.Pointer(p), unsafe.Sizeof(*p))) {
		entry := C.GoString(*p)
		name, _, _ := strings.Cut(entry, "=")
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	return names
}
