// Package version is gonccl's version, read from capi/gonccl.h (GONCCL_MAJOR,
// GONCCL_MINOR, GONCCL_PATCH): the one place it is written. The C ABI, the Go code
// (through this package) and the Python package (setup.py and gonccl.__version__)
// all read it there.
package version

// #cgo CFLAGS: -I${SRCDIR}/../../capi
// #include "gonccl.h"
import "C"

import "fmt"

// The version's parts.
const (
	Major = int(C.GONCCL_MAJOR)
	Minor = int(C.GONCCL_MINOR)
	Patch = int(C.GONCCL_PATCH)
)

// Code encodes the version like NCCL_VERSION_CODE: major*10000 + minor*100 + patch
// (gonccl.h's GONCCL_VERSION_CODE).
const Code = Major*10000 + Minor*100 + Patch

// String is the version as "major.minor.patch".
var String = fmt.Sprintf("%d.%d.%d", Major, Minor, Patch)
