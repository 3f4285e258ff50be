package main

// #include "handles.h"
import "C"

import (
	"fmt"

	"github.com/gonccl/gonccl/core"
)

// goncclCommRefuse: this rank will not make its next collective on comm, because a
// check of its arguments failed before the call; the peers are told why (see
// core.Comm.Refuse).
//
//export goncclCommRefuse
func goncclCommRefuse(h C.goncclComm_t, kind C.goncclOpKind_t, reason *C.char) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if reason == nil {
		return fail(e, fmt.Errorf("%w: goncclCommRefuse: reason is NULL", core.ErrInvalidArgument))
	}
	if kind < 1 || kind > 255 {
		return fail(e, fmt.Errorf("%w: goncclCommRefuse: %d is not a collective's kind", core.ErrInvalidArgument, int64(kind)))
	}
	if err := e.comm.Refuse(core.Kind(kind), C.GoString(reason)); err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}
