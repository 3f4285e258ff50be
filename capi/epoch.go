package main

// #include "handles.h"
import "C"

// goncclCommInitRankEpoch is goncclCommInitRankTimeout for a given communicator
// generation (see core/epoch.go): shrink and reconfigure pass their parent's epoch + 1.
//
//export goncclCommInitRankEpoch
func goncclCommInitRankEpoch(out *C.goncclComm_t, nranks C.int, cid C.goncclUniqueId, rank C.int, timeoutMs C.int64_t, epoch C.uint32_t) (res C.goncclResult_t) {
	defer guard(&res)
	opts := timeoutOptions(timeoutMs)
	opts.Epoch = uint32(epoch)
	return initRank("goncclCommInitRankEpoch", out, nranks, cid, rank, opts)
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
