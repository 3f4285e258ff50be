package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/gonccl/gonccl/core"
)

// goncclCommInitRankEpoch is goncclCommInitRankTimeout for a given communicator
// generation (see core/epoch.go): shrink and reconfigure pass their parent's epoch + 1.
//
//export goncclCommInitRankEpoch
func goncclCommInitRankEpoch(out *C.goncclComm_t, nranks C.int, cid C.goncclUniqueId, rank C.int, timeoutMs C.int64_t, epoch C.uint32_t) (res C.goncclResult_t) {
	defer guard(&res)
	if out == nil {
		return fail(nil, fmt.Errorf("%w: goncclCommInitRankEpoch: comm is NULL", core.ErrInvalidArgument))
	}
	*out = nil
	var id core.UniqueID
	copy(id[:], unsafe.Slice((*byte)(unsafe.Pointer(&cid.internal[0])), core.UniqueIDSize))
	opts := core.Options{Epoch: uint32(epoch)}
	if timeoutMs > 0 {
		opts.Timeout = time.Duration(timeoutMs) * time.Millisecond
	}
	c, err := core.NewComm(id, int(nranks), int(rank), opts)
	if err != nil {
		return fail(nil, err)
	}
	*out = register(c)
	return C.goncclSuccess
}

// goncclCommEpoch reports comm's generation and how many frames of older generations
// it has dropped (either pointer may be NULL).
//
//export goncclCommEpoch
func goncclCommEpoch(h C.goncclComm_t, epoch *C.uint32_t, staleFrames *C.uint64_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if epoch != nil {
		*epoch = C.uint32_t(e.comm.Epoch())
	}
	if staleFrames != nil {
		*staleFrames = C.uint64_t(e.comm.StaleFrames())
	}
	return C.goncclSuccess
}
