package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gonccl/gonccl/core"
)

// hostBytes views n elements of dt at p as a byte slice (no copy). A NULL pointer is
// allowed only for zero elements.
func hostBytes(what string, p unsafe.Pointer, n uint64, dt core.DataType) ([]byte, error) {
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: unknown data type %d", core.ErrInvalidArgument, uint8(dt))
	}
	es := uint64(dt.Size())
	if n > math.MaxInt64/es/16 {
		return nil, fmt.Errorf("%w: %s: count %d x %s overflows", core.ErrInvalidArgument, what, n, dt)
	}
	if n == 0 {
		return []byte{}, nil
	}
	if p == nil {
		return nil, fmt.Errorf("%w: %s is NULL", core.ErrInvalidArgument, what)
	}
	return unsafe.Slice((*byte)(p), n*es), nil
}

// hostOnly rejects CUDA streams, which belong to the CUDA path.
func hostOnly(stream C.goncclStream_t) error {
	if stream != nil {
		return fmt.Errorf("%w: CUDA streams (device buffers) are not supported yet; pass stream = NULL with host buffers", core.ErrNotSupported)
	}
	return nil
}

// issue runs one operation: start enqueues it; then either a request handle is
// returned (async) or the call waits for it.
func issue(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool,
	start func(c *core.Comm) (*core.Request, error)) C.goncclResult_t {
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if async {
		if out == nil {
			return fail(e, fmt.Errorf("%w: request is NULL", core.ErrInvalidArgument))
		}
		*out = nil
	}
	if err := hostOnly(stream); err != nil {
		return fail(e, err)
	}
	req, err := start(e.comm)
	if err != nil {
		return fail(e, err)
	}
	if async {
		*out = newRequestHandle(req, e)
		return C.goncclSuccess
	}
	_, err = req.Wait(-1)
	if err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}

func allReduce(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm) (*core.Request, error) {
		d := core.DataType(dt)
		s, err := hostBytes("sendbuff", send, uint64(count), d)
		if err != nil {
			return nil, err
		}
		r, err := hostBytes("recvbuff", recv, uint64(count), d)
		if err != nil {
			return nil, err
		}
		return c.AllReduce(s, r, int(count), d, core.RedOp(op))
	})
}

func broadcast(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm) (*core.Request, error) {
		d := core.DataType(dt)
		var s []byte
		if int(root) == c.Rank() {
			var err error
			if s, err = hostBytes("sendbuff", send, uint64(count), d); err != nil {
				return nil, err
			}
		}
		r, err := hostBytes("recvbuff", recv, uint64(count), d)
		if err != nil {
			return nil, err
		}
		return c.Broadcast(s, r, int(count), d, int(root))
	})
}

func allGather(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm) (*core.Request, error) {
		d := core.DataType(dt)
		s, err := hostBytes("sendbuff", send, uint64(count), d)
		if err != nil {
			return nil, err
		}
		r, err := hostBytes("recvbuff", recv, uint64(count)*uint64(c.Size()), d)
		if err != nil {
			return nil, err
		}
		return c.AllGather(s, r, int(count), d)
	})
}

func barrier(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm) (*core.Request, error) { return c.Barrier() })
}

//export goncclAllReduce
func goncclAllReduce(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return allReduce(send, recv, count, dt, op, h, stream, nil, false)
}

//export goncclAllReduceAsync
func goncclAllReduceAsync(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return allReduce(send, recv, count, dt, op, h, stream, out, true)
}

//export goncclBroadcast
func goncclBroadcast(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return broadcast(send, recv, count, dt, root, h, stream, nil, false)
}

//export goncclBroadcastAsync
func goncclBroadcastAsync(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return broadcast(send, recv, count, dt, root, h, stream, out, true)
}

//export goncclAllGather
func goncclAllGather(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return allGather(send, recv, count, dt, h, stream, nil, false)
}

//export goncclAllGatherAsync
func goncclAllGatherAsync(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return allGather(send, recv, count, dt, h, stream, out, true)
}

//export goncclBarrier
func goncclBarrier(h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return barrier(h, stream, nil, false)
}

//export goncclBarrierAsync
func goncclBarrierAsync(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return barrier(h, stream, out, true)
}
