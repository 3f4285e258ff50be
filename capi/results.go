package main

// #include "handles.h"
import "C"

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/route"
)

// resultOf maps an error to its result code: the one table between core's sentinel
// errors and the C ABI.
func resultOf(err error) C.goncclResult_t {
	switch {
	case err == nil:
		return C.goncclSuccess
	case errors.Is(err, core.ErrInternal):
		return C.goncclInternalError
	case errors.Is(err, core.ErrInvalidArgument):
		return C.goncclInvalidArgument
	case errors.Is(err, core.ErrTimeout):
		return C.goncclTimeout
	case errors.Is(err, core.ErrMismatch):
		return C.goncclMismatch
	case errors.Is(err, core.ErrAborted):
		return C.goncclAborted
	case errors.Is(err, core.ErrNotSupported):
		return C.goncclNotSupported
	case errors.Is(err, core.ErrClosed), errors.Is(err, errUsage):
		return C.goncclInvalidUsage
	case errors.Is(err, core.ErrPeerClosed):
		return C.goncclRemoteError
	case isCUDA(err):
		return C.goncclUnhandledCudaError
	}
	return C.goncclSystemError
}

var errUsage = route.ErrUsage

// resultStrings are static C strings, so goncclGetErrorString's pointers never move.
var resultStrings = map[C.goncclResult_t]*C.char{}

func init() {
	for code, s := range map[C.goncclResult_t]string{
		C.goncclSuccess:            "no error",
		C.goncclUnhandledCudaError: "unhandled cuda error",
		C.goncclSystemError:        "unhandled system error (network, memory or operating system)",
		C.goncclInternalError:      "internal error - please report this issue to the gonccl developers",
		C.goncclInvalidArgument:    "invalid argument",
		C.goncclInvalidUsage:       "invalid usage",
		C.goncclRemoteError:        "remote process exited or there was a network error",
		C.goncclInProgress:         "operation in progress",
		C.goncclTimeout:            "operation timed out",
		C.goncclMismatch:           "ranks called mismatched collectives",
		C.goncclAborted:            "communicator aborted",
		C.goncclNotSupported:       "operation not supported",
	} {
		resultStrings[code] = C.CString(s)
	}
}

// unknownResult is goncclGetErrorString's answer for a code it does not know.
var unknownResult = C.CString("unknown result code")

// emptyString is returned where there is no message.
var emptyString = C.CString("")

// lastError holds the message of the most recent error in the process
// (goncclGetLastError(NULL)).
var lastError struct {
	sync.Mutex
	msg string
}

func recordGlobal(err error) {
	lastError.Lock()
	lastError.msg = err.Error()
	lastError.Unlock()
}

// guard turns a panic in an exported function into goncclInternalError.
func guard(res *C.goncclResult_t) {
	if r := recover(); r != nil {
		recordGlobal(fmt.Errorf("gonccl internal error: %v\n%s", r, debug.Stack()))
		*res = C.goncclInternalError
	}
}

//export goncclGetErrorString
func goncclGetErrorString(result C.goncclResult_t) *C.char {
	if s, ok := resultStrings[result]; ok {
		return s
	}
	return unknownResult
}

// gonccl.h (GONCCL_MAJOR, GONCCL_MINOR, GONCCL_PATCH) is the version's one source:
// goncclGetVersion returns its GONCCL_VERSION_CODE, core's init log prints it, and
// setup.py and gonccl.__version__ read the same header. It sits in this package's
// directory, so Go's build cache rebuilds this package when it changes.
func init() {
	core.Version = fmt.Sprintf("%d.%d.%d", C.GONCCL_MAJOR, C.GONCCL_MINOR, C.GONCCL_PATCH)
}

//export goncclGetVersion
func goncclGetVersion(version *C.int) (res C.goncclResult_t) {
	defer guard(&res)
	if version == nil {
		return fail(nil, fmt.Errorf("%w: goncclGetVersion: version is NULL", core.ErrInvalidArgument))
	}
	*version = C.GONCCL_VERSION_CODE
	return C.goncclSuccess
}
