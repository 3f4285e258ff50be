package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gonccl/gonccl/core"
)

// p2pIssue starts one send or receive. Async calls return a request handle. A blocking
// call waits for it, unless the calling thread is inside goncclGroupStart/End: then the
// request joins the group and goncclGroupEnd waits for it (as in NCCL, where the calls
// of a group are only launched at its end; waiting here would deadlock a ring of
// blocking sends whose messages are too large to be sent before their receive).
func p2pIssue(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool,
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
	if joinGroup(req, e) {
		return C.goncclSuccess
	}
	if _, err := req.Wait(-1); err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}

func send(buf unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer, tag C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return p2pIssue(h, stream, out, async, func(c *core.Comm) (*core.Request, error) {
		d := core.DataType(dt)
		b, err := hostBytes("sendbuff", buf, uint64(count), d)
		if err != nil {
			return nil, err
		}
		return c.Send(b, int(count), d, int(peer), int(tag))
	})
}

func recv(buf unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer, tag C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return p2pIssue(h, stream, out, async, func(c *core.Comm) (*core.Request, error) {
		d := core.DataType(dt)
		b, err := hostBytes("recvbuff", buf, uint64(count), d)
		if err != nil {
			return nil, err
		}
		return c.Recv(b, int(count), d, int(peer), int(tag))
	})
}

//export goncclSend
func goncclSend(buf unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer C.int,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return send(buf, count, dt, peer, 0, h, stream, nil, false)
}

//export goncclRecv
func goncclRecv(buf unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer C.int,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return recv(buf, count, dt, peer, 0, h, stream, nil, false)
}

//export goncclSendAsync
func goncclSendAsync(buf unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer, tag C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return send(buf, count, dt, peer, tag, h, stream, out, true)
}

//export goncclRecvAsync
func goncclRecvAsync(buf unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer, tag C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return recv(buf, count, dt, peer, tag, h, stream, out, true)
}
