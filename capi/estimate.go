package main

// #include "handles.h"
import "C"

import (
	"fmt"

	"github.com/gonccl/gonccl/core"
)

// goncclCommEstimate gives the cost model's time for one operation of kind on bytes
// (see core.Comm.Estimate), in microseconds.
//
//export goncclCommEstimate
func goncclCommEstimate(h C.goncclComm_t, kind C.goncclOpKind_t, bytes C.size_t, us *C.double) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if us == nil {
		return fail(e, fmt.Errorf("%w: goncclCommEstimate: us is NULL", core.ErrInvalidArgument))
	}
	if uint64(bytes) > 1<<62 {
		return fail(e, fmt.Errorf("%w: goncclCommEstimate: %d bytes", core.ErrInvalidArgument, uint64(bytes)))
	}
	t, _, err := e.comm.Estimate(core.Kind(kind), int(bytes))
	if err != nil {
		return fail(e, err)
	}
	*us = C.double(t)
	return C.goncclSuccess
}
