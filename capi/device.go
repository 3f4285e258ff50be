package main

// #include "handles.h"
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/devroute"
)

//export goncclStreamCheck
func goncclStreamCheck(stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	if stream == nil {
		return fail(nil, fmt.Errorf("%w: goncclStreamCheck: stream is NULL (pass cudaStreamLegacy for the default stream)", core.ErrInvalidArgument))
	}
	drv, err := driver.Default()
	if err != nil {
		return fail(nil, fmt.Errorf("%w: stream given but CUDA is not available: %w", errUsage, err))
	}
	if err := devroute.CheckStream(drv, driver.Stream(uintptr(unsafe.Pointer(stream)))); err != nil {
		return fail(nil, err)
	}
	return C.goncclSuccess
}

//export goncclStreamCheckDevice
func goncclStreamCheckDevice(stream C.goncclStream_t, device C.int) (res C.goncclResult_t) {
	defer guard(&res)
	if stream == nil {
		return fail(nil, fmt.Errorf("%w: goncclStreamCheckDevice: stream is NULL (pass cudaStreamLegacy for the default stream)", core.ErrInvalidArgument))
	}
	if device < 0 {
		return fail(nil, fmt.Errorf("%w: goncclStreamCheckDevice: device %d is not a CUDA device ordinal", core.ErrInvalidArgument, int(device)))
	}
	drv, err := driver.Default()
	if err != nil {
		return fail(nil, fmt.Errorf("%w: stream given but CUDA is not available: %w", errUsage, err))
	}
	if err := devroute.CheckStreamOn(drv, driver.Stream(uintptr(unsafe.Pointer(stream))), int(device)); err != nil {
		return fail(nil, err)
	}
	return C.goncclSuccess
}

//export goncclRequestHoldStream
func goncclRequestHoldStream(h C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	if e.staging != nil {
		e.staging.Hold()
	}
	return C.goncclSuccess
}

//export goncclRequestReleaseStream
func goncclRequestReleaseStream(h C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	if e.staging != nil {
		e.staging.Release()
	}
	return C.goncclSuccess
}

//export goncclRequestWaitStream
func goncclRequestWaitStream(h C.goncclRequest_t, waiter C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	if _, err := e.req.Wait(-1); err != nil {
		return e.finish(err)
	}
	if waiter == nil || e.staging == nil {
		return C.goncclSuccess
	}
	if err := e.staging.WaitOn(driver.Stream(uintptr(unsafe.Pointer(waiter)))); err != nil {
		return fail(e.comm, fmt.Errorf("goncclRequestWaitStream: %w", err))
	}
	return C.goncclSuccess
}

// isCUDA reports whether err is a CUDA driver error.
func isCUDA(err error) bool {
	var ce *driver.Error
	return errors.As(err, &ce)
}
