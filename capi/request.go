package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/staged"
)

// reqEntry is what a goncclRequest_t refers to.
type reqEntry struct {
	req     *core.Request
	comm    *commEntry
	staging *staged.Staging // device buffers: the op's completion event (nil: host buffers)
	mu      sync.Mutex
	msg     *C.char // error message once failed
}

var requests = struct {
	sync.Mutex
	next uint64
	m    map[uint64]*reqEntry
}{m: map[uint64]*reqEntry{}}

// newRequestHandle registers req and returns the handle a C caller holds.
func newRequestHandle(req *core.Request, ce *commEntry, st *staged.Staging) C.goncclRequest_t {
	e := &reqEntry{req: req, comm: ce, staging: st}
	requests.Lock()
	requests.next++
	id := requests.next
	requests.m[id] = e
	requests.Unlock()
	h := (*C.struct_goncclRequest)(C.malloc(C.size_t(unsafe.Sizeof(C.struct_goncclRequest{}))))
	h.id = C.ulonglong(id)
	return C.goncclRequest_t(unsafe.Pointer(h))
}

func lookupRequest(h C.goncclRequest_t) (*reqEntry, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: request is NULL", core.ErrInvalidArgument)
	}
	requests.Lock()
	e := requests.m[uint64((*C.struct_goncclRequest)(unsafe.Pointer(h)).id)]
	requests.Unlock()
	if e == nil {
		return nil, fmt.Errorf("%w: request was freed or is not a gonccl request", errUsage)
	}
	return e, nil
}

// finish converts a finished request's error into a result, recording the message.
func (e *reqEntry) finish(err error) C.goncclResult_t {
	if err == nil {
		return C.goncclSuccess
	}
	e.mu.Lock()
	if e.msg == nil {
		e.msg = C.CString(err.Error())
	}
	e.mu.Unlock()
	return fail(e.comm, err)
}

//export goncclRequestTest
func goncclRequestTest(h C.goncclRequest_t, done *C.int) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	if done == nil {
		return fail(nil, fmt.Errorf("%w: goncclRequestTest: done is NULL", core.ErrInvalidArgument))
	}
	finished, err := e.req.Test()
	if !finished {
		*done = 0
		return C.goncclSuccess
	}
	*done = 1
	return e.finish(err)
}

//export goncclRequestWait
func goncclRequestWait(h C.goncclRequest_t, timeoutMs C.int64_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	timeout := time.Duration(-1)
	if timeoutMs >= 0 {
		timeout = msDuration(int64(timeoutMs))
	}
	finished, err := e.req.Wait(timeout)
	if !finished {
		return C.goncclTimeout
	}
	return e.finish(err)
}

//export goncclRequestOnComplete
func goncclRequestOnComplete(h C.goncclRequest_t, fn C.goncclCallback_t, arg unsafe.Pointer) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	if fn == nil {
		return fail(nil, fmt.Errorf("%w: goncclRequestOnComplete: callback is NULL", core.ErrInvalidArgument))
	}
	e.req.OnComplete(func(err error) {
		C.goncclInvokeCallback(fn, arg, e.finish(err))
	})
	return C.goncclSuccess
}

//export goncclRequestErrorString
func goncclRequestErrorString(h C.goncclRequest_t) *C.char {
	e, err := lookupRequest(h)
	if err != nil {
		return emptyString
	}
	if finished, rerr := e.req.Test(); finished && rerr != nil {
		e.finish(rerr)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.msg == nil {
		return emptyString
	}
	return e.msg
}

//export goncclRequestSource
func goncclRequestSource(h C.goncclRequest_t, peer *C.int) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	if peer == nil {
		return fail(nil, fmt.Errorf("%w: goncclRequestSource: peer is NULL", core.ErrInvalidArgument))
	}
	*peer = C.int(e.req.Source())
	return C.goncclSuccess
}

//export goncclRequestFree
func goncclRequestFree(h C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupRequest(h)
	if err != nil {
		return fail(nil, err)
	}
	if e.staging != nil {
		// A hold outlives no request: nobody could release it any more.
		e.staging.Release()
	}
	hs := (*C.struct_goncclRequest)(unsafe.Pointer(h))
	requests.Lock()
	delete(requests.m, uint64(hs.id))
	requests.Unlock()
	C.free(unsafe.Pointer(hs))
	e.mu.Lock()
	if e.msg != nil {
		// A callback still to run holds e and may read msg: free it only if done.
		if finished, _ := e.req.Test(); finished {
			C.free(unsafe.Pointer(e.msg))
			e.msg = nil
		}
	}
	e.mu.Unlock()
	return C.goncclSuccess
}
