package main

// #include "handles.h"
import "C"

import (
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/devroute"
)

func send(p unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer, tag C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issueP2P(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		sb := devroute.In("sendbuff", p, uint64(count))
		if req, ok, err := v.TryDeviceP2P(c, false, d, sb, int(peer), async); ok || err != nil {
			return req, err
		}
		b, err := v.Get(d, sb)
		if err != nil {
			return nil, err
		}
		// Device buffers: the data is copied to host memory now, after the work queued
		// on the stream so far, then sent from there.
		if err := v.CopyIn(); err != nil {
			return nil, err
		}
		req, err := c.Send(b[0], int(count), d, int(peer), int(tag))
		if err != nil {
			return nil, err
		}
		return v.Then(req), nil
	})
}

func recv(p unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer, tag C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issueP2P(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		rb := devroute.Out("recvbuff", p, uint64(count))
		if req, ok, err := v.TryDeviceP2P(c, true, d, rb, int(peer), async); ok || err != nil {
			return req, err
		}
		b, err := v.Get(d, rb)
		if err != nil {
			return nil, err
		}
		// Device buffers: received into host memory, copied to the device on the
		// stream when the data is in, before the request completes.
		req, err := c.Recv(b[0], int(count), d, int(peer), int(tag))
		if err != nil {
			return nil, err
		}
		return v.Then(req), nil
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
