package main

// #include "handles.h"
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/transport/shm"
)

// goncclMemAlloc allocates size bytes of gonccl's shared memory (a memfd mapped
// MAP_SHARED, see shm.Alloc), zeroed, in the spirit of ncclMemAlloc. Collectives whose
// buffers all lie in such memory on one host run without copies through the rings
// (core/zerocopy.go).
//
//export goncclMemAlloc
func goncclMemAlloc(ptr *unsafe.Pointer, size C.size_t) (res C.goncclResult_t) {
	defer guard(&res)
	if ptr == nil {
		return fail(nil, fmt.Errorf("%w: goncclMemAlloc: ptr is NULL", core.ErrInvalidArgument))
	}
	if size == 0 || uint64(size) > 1<<46 {
		return fail(nil, fmt.Errorf("%w: goncclMemAlloc: %d bytes", core.ErrInvalidArgument, uint64(size)))
	}
	r, err := shm.Alloc(int(size))
	if err != nil {
		return fail(nil, fmt.Errorf("goncclMemAlloc: %w", err))
	}
	*ptr = unsafe.Pointer(unsafe.SliceData(r.Mem))
	return C.goncclSuccess
}

// goncclMemFree frees memory from goncclMemAlloc.
//
//export goncclMemFree
func goncclMemFree(ptr unsafe.Pointer) (res C.goncclResult_t) {
	defer guard(&res)
	r := shm.RegionAt(uintptr(ptr))
	if r == nil {
		return fail(nil, fmt.Errorf("%w: goncclMemFree: %p was not allocated by goncclMemAlloc (or was freed)", errUsage, ptr))
	}
	if err := r.Free(); errors.Is(err, shm.ErrFreed) {
		return fail(nil, fmt.Errorf("%w: goncclMemFree: %p was freed already", errUsage, ptr))
	} else if err != nil {
		return fail(nil, fmt.Errorf("goncclMemFree: %w", err))
	}
	return C.goncclSuccess
}
