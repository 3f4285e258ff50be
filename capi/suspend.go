package main

// #include "handles.h"
import "C"

import (
	"fmt"

	"github.com/gonccl/gonccl/core"
)

// Suspend, resume, memory statistics and eager connection (see core/suspend.go and
// core/connect.go). Besides the communicator's host memory, suspend frees the CUDA
// path's pinned staging pool (made again on the next staged operation) and the device
// path's scratch (closed collectively, as at destroy: every rank suspends; the next
// device-path operation sets it up again, collectively).

//export goncclCommSuspend
func goncclCommSuspend(h C.goncclComm_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if err := e.comm.Suspend(); err != nil {
		return fail(e, err)
	}
	if err := e.dev.Suspend(); err != nil {
		return fail(e, fmt.Errorf("gonccl: suspend: freeing CUDA memory: %w", err))
	}
	return C.goncclSuccess
}

//export goncclCommResume
func goncclCommResume(h C.goncclComm_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if err := e.comm.Resume(); err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}

//export goncclCommMemoryStats
func goncclCommMemoryStats(h C.goncclComm_t, stats *C.goncclMemoryStats_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if stats == nil {
		return fail(e, fmt.Errorf("%w: goncclCommMemoryStats: stats is NULL", core.ErrInvalidArgument))
	}
	m := e.comm.Memory()
	out := C.goncclMemoryStats_t{
		scratchBytes: C.int64_t(m.Scratch),
		workBytes:    C.int64_t(m.Work),
		shmRingBytes: C.int64_t(m.ShmRing),
	}
	pinned, scratch := e.dev.Memory()
	out.pinnedBytes, out.deviceScratchBytes = C.int64_t(pinned), C.int64_t(scratch)
	*stats = out
	return C.goncclSuccess
}

//export goncclCommConnectAll
func goncclCommConnectAll(h C.goncclComm_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if err := e.comm.ConnectAll(); err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}

//export goncclCommConnectedPeers
func goncclCommConnectedPeers(h C.goncclComm_t, count *C.int) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if count == nil {
		return fail(e, fmt.Errorf("%w: goncclCommConnectedPeers: count is NULL", core.ErrInvalidArgument))
	}
	*count = C.int(len(e.comm.Connected()))
	return C.goncclSuccess
}
