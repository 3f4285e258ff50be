package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/transport/shm"
)

// The regions goncclMemAlloc handed out, by address.
var regions = struct {
	sync.Mutex
	m map[uintptr]*shm.Region
}{m: map[uintptr]*shm.Region{}}

// goncclMemAlloc allocates size bytes of gonccl's shared memory (a memfd mapped
// MAP_SHARED, see shm.Alloc), zeroed, in the spirit of ncclMemAlloc.
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
	p := unsafe.Pointer(unsafe.SliceData(r.Mem))
	regions.Lock()
	regions.m[uintptr(p)] = r
	regions.Unlock()
	*ptr = p
	return C.goncclSuccess
}

// goncclMemFree frees memory from goncclMemAlloc.
//
//export goncclMemFree
func goncclMemFree(ptr unsafe.Pointer) (res C.goncclResult_t) {
	defer guard(&res)
	regions.Lock()
	r := regions.m[uintptr(ptr)]
	delete(regions.m, uintptr(ptr))
	regions.Unlock()
	if r == nil {
		return fail(nil, fmt.Errorf("%w: goncclMemFree: %p was not allocated by goncclMemAlloc (or was freed)", errUsage, ptr))
	}
	if err := r.Free(); err != nil {
		return fail(nil, fmt.Errorf("goncclMemFree: %w", err))
	}
	return C.goncclSuccess
}
