package main

// #include <stdint.h>
// #include "handles.h"
// static goncclStream_t gcStreamHandle(uintptr_t s) { return (goncclStream_t)s; }
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/driver"
)

//export goncclStreamAcquire
func goncclStreamAcquire(device C.int, stream *C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	if stream == nil {
		return fail(nil, fmt.Errorf("%w: goncclStreamAcquire: stream is NULL", core.ErrInvalidArgument))
	}
	*stream = nil
	if device < 0 {
		return fail(nil, fmt.Errorf("%w: goncclStreamAcquire: device %d", core.ErrInvalidArgument, int(device)))
	}
	drv, err := driver.Default()
	if err != nil {
		return fail(nil, fmt.Errorf("%w: goncclStreamAcquire: CUDA is not available: %w", errUsage, err))
	}
	s, err := drv.OwnStream(int(device))
	if err != nil {
		return fail(nil, fmt.Errorf("goncclStreamAcquire: %w", err))
	}
	*stream = C.gcStreamHandle(C.uintptr_t(s))
	return C.goncclSuccess
}

//export goncclStreamRelease
func goncclStreamRelease(stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	drv, err := driver.Default()
	if err != nil {
		return fail(nil, fmt.Errorf("%w: goncclStreamRelease: CUDA is not available: %w", errUsage, err))
	}
	if err := drv.ReturnStream(driver.Stream(uintptr(unsafe.Pointer(stream)))); err != nil {
		return fail(nil, fmt.Errorf("%w: goncclStreamRelease: %w", errUsage, err))
	}
	return C.goncclSuccess
}
