package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/devroute"
)

// issue runs one collective: start enqueues it, taking its buffers from v (host
// memory, or device memory staged through pinned host buffers when a stream is given);
// then either a request handle is returned (async) or the call waits for it.
func issue(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool,
	start func(c *core.Comm, v *devroute.Views) (*core.Request, error)) C.goncclResult_t {
	return run(h, stream, out, async, false, start)
}

// issueP2P runs one send or receive like issue, except that a blocking call inside
// goncclGroupStart/End does not wait: its request joins the group and goncclGroupEnd
// waits for it (as in NCCL, where a group's calls launch at its end; waiting here would
// deadlock a ring of blocking sends too large to go out before their receives).
// Point-to-point does not run on the executor: with device buffers, a send copies its
// data to host memory on the issuing thread, a receive copies it to the device when it
// has arrived (views.copyIn, views.then).
func issueP2P(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool,
	start func(c *core.Comm, v *devroute.Views) (*core.Request, error)) C.goncclResult_t {
	return run(h, stream, out, async, true, start)
}

func run(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async, groupable bool,
	start func(c *core.Comm, v *devroute.Views) (*core.Request, error)) C.goncclResult_t {
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
	v, err := devroute.NewViews(e.dev, driver.Stream(uintptr(unsafe.Pointer(stream))))
	if err != nil {
		return fail(e, err)
	}
	var group *devroute.Group
	if groupable { // point-to-point is the groupable kind
		group = currentGroup()
		v.SetP2P(group)
	}
	if !async && group == nil {
		v.WaitedAtOnce()
	}
	req, err := start(e.comm, v)
	if err != nil {
		v.Cancel()
		return fail(e, err)
	}
	if async {
		*out = newRequestHandle(req, e, v.Staging())
		return C.goncclSuccess
	}
	if groupable && joinGroup(req, e) {
		return C.goncclSuccess
	}
	if _, err := req.Wait(-1); err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}

func allReduce(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, rop, err := typeAndOp(dt, op)
		if err != nil {
			return nil, err
		}
		return v.Run(c, devroute.Op{Kind: core.KindAllReduce, Type: d, RedOp: &rop, Root: core.NoRoot, Count: int(count),
			Send: devroute.In("sendbuff", send, uint64(count)), Recv: devroute.Out("recvbuff", recv, uint64(count)), Blocks: [2]int{1, 1},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.AllReduce(b[0], b[1], n, d, rop, o...)
			}})
	})
}

// typeAndOp converts a reduction's C data type and operation.
func typeAndOp(dt C.goncclDataType_t, op C.goncclRedOp_t) (core.DataType, core.RedOp, error) {
	d, err := dataType(dt)
	if err != nil {
		return d, 0, err
	}
	rop, err := redOp(op)
	return d, rop, err
}

func broadcast(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		var sb devroute.Buf // sendbuff is read on the root only
		if int(root) == c.Rank() {
			sb = devroute.In("sendbuff", send, uint64(count))
		}
		return v.Run(c, devroute.Op{Kind: core.KindBroadcast, Type: d, Root: int(root), Count: int(count),
			Send: sb, Recv: devroute.Out("recvbuff", recv, uint64(count)), Blocks: [2]int{1, 1},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.Broadcast(b[0], b[1], n, d, int(root), o...)
			}})
	})
}

func allGather(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		total, err := perRank("recvbuff", count, c.Size())
		if err != nil {
			return nil, err
		}
		return v.Run(c, devroute.Op{Kind: core.KindAllGather, Type: d, Root: core.NoRoot, Count: int(count),
			Send: devroute.In("sendbuff", send, uint64(count)), Recv: devroute.Out("recvbuff", recv, total), Blocks: [2]int{1, c.Size()},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.AllGather(b[0], b[1], n, d, o...)
			}})
	})
}

func barrier(h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		return v.Run(c, devroute.Op{Kind: core.KindBarrier, Type: core.Int8, Root: core.NoRoot,
			Host: func(_ [][]byte, _ int, o []core.OpOption) (*core.Request, error) { return c.Barrier(o...) }})
	})
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

// perRank returns count*nranks, or an error if it overflows. Core checks the same
// product (perRankTotal), but capi needs it first, to size the caller's buffer.
func perRank(what string, count C.size_t, nranks int) (uint64, error) {
	if uint64(count) > math.MaxInt64/uint64(nranks) {
		return 0, fmt.Errorf("%w: %s: count %d x %d ranks overflows", core.ErrInvalidArgument, what, uint64(count), nranks)
	}
	return uint64(count) * uint64(nranks), nil
}

func reduce(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, rop, err := typeAndOp(dt, op)
		if err != nil {
			return nil, err
		}
		var rb devroute.Buf // recvbuff is not touched off the root
		if int(root) == c.Rank() {
			rb = devroute.Out("recvbuff", recv, uint64(count))
		}
		return v.Run(c, devroute.Op{Kind: core.KindReduce, Type: d, RedOp: &rop, Root: int(root), Count: int(count),
			Send: devroute.In("sendbuff", send, uint64(count)), Recv: rb, Blocks: [2]int{1, 1},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.Reduce(b[0], b[1], n, d, rop, int(root), o...)
			}})
	})
}

func reduceScatter(send, recv unsafe.Pointer, recvCount C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		total, err := perRank("sendbuff", recvCount, c.Size())
		if err != nil {
			return nil, err
		}
		rop, err := redOp(op)
		if err != nil {
			return nil, err
		}
		return v.Run(c, devroute.Op{Kind: core.KindReduceScatter, Type: d, RedOp: &rop, Root: core.NoRoot, Count: int(recvCount),
			Send: devroute.In("sendbuff", send, total), Recv: devroute.Out("recvbuff", recv, uint64(recvCount)), Blocks: [2]int{c.Size(), 1},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.ReduceScatter(b[0], b[1], n, d, rop, o...)
			}})
	})
}

func gather(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		var rb devroute.Buf // recvbuff is used on the root only
		if int(root) == c.Rank() {
			total, err := perRank("recvbuff", count, c.Size())
			if err != nil {
				return nil, err
			}
			rb = devroute.Out("recvbuff", recv, total)
		}
		return v.Run(c, devroute.Op{Kind: core.KindGather, Type: d, Root: int(root), Count: int(count),
			Send: devroute.In("sendbuff", send, uint64(count)), Recv: rb, Blocks: [2]int{1, c.Size()},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.Gather(b[0], b[1], n, d, int(root), o...)
			}})
	})
}

func scatter(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		var sb devroute.Buf // sendbuff is used on the root only
		if int(root) == c.Rank() {
			total, err := perRank("sendbuff", count, c.Size())
			if err != nil {
				return nil, err
			}
			sb = devroute.In("sendbuff", send, total)
		}
		return v.Run(c, devroute.Op{Kind: core.KindScatter, Type: d, Root: int(root), Count: int(count),
			Send: sb, Recv: devroute.Out("recvbuff", recv, uint64(count)), Blocks: [2]int{c.Size(), 1},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.Scatter(b[0], b[1], n, d, int(root), o...)
			}})
	})
}

func alltoAll(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		total, err := perRank("buffers", count, c.Size())
		if err != nil {
			return nil, err
		}
		return v.Run(c, devroute.Op{Kind: core.KindAlltoAll, Type: d, Root: core.NoRoot, Count: int(count),
			Send: devroute.In("sendbuff", send, total), Recv: devroute.Out("recvbuff", recv, total), Blocks: [2]int{c.Size(), c.Size()},
			Host: func(b [][]byte, n int, o []core.OpOption) (*core.Request, error) {
				return c.AlltoAll(b[0], b[1], n, d, o...)
			}})
	})
}

// sizes copies n size_t values at p (a caller's counts or displacements array). It and
// extent bound them because capi sizes the caller's buffers from them; core checks
// each block against the slices it is given.
func sizes(what string, p *C.size_t, n int) ([]int, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: %s is NULL", core.ErrInvalidArgument, what)
	}
	out := make([]int, n)
	for i, v := range unsafe.Slice(p, n) {
		if uint64(v) > math.MaxInt64/16 {
			return nil, fmt.Errorf("%w: %s[%d] = %d is too large", core.ErrInvalidArgument, what, i, uint64(v))
		}
		out[i] = int(v)
	}
	return out, nil
}

// extent returns how many elements counts and displs reach into their buffer.
func extent(what string, counts, displs []int) (uint64, error) {
	var end uint64
	for j := range counts {
		if counts[j] > 0 {
			end = max(end, uint64(displs[j])+uint64(counts[j]))
		}
	}
	if end > math.MaxInt64/16 {
		return 0, fmt.Errorf("%w: %s: counts and displacements reach element %d", core.ErrInvalidArgument, what, end)
	}
	return end, nil
}

func alltoAllv(send unsafe.Pointer, sendCounts, sendDispls *C.size_t, recv unsafe.Pointer, recvCounts, recvDispls *C.size_t,
	dt C.goncclDataType_t, h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return issue(h, stream, out, async, func(c *core.Comm, v *devroute.Views) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		n := c.Size()
		var arrays [4][]int
		for i, a := range []struct {
			name string
			p    *C.size_t
		}{{"sendcounts", sendCounts}, {"sdispls", sendDispls}, {"recvcounts", recvCounts}, {"rdispls", recvDispls}} {
			var err error
			if arrays[i], err = sizes(a.name, a.p, n); err != nil {
				return nil, err
			}
		}
		sc, sd, rc, rd := arrays[0], arrays[1], arrays[2], arrays[3]
		sendLen, err := extent("sendbuff", sc, sd)
		if err != nil {
			return nil, err
		}
		recvLen, err := extent("recvbuff", rc, rd)
		if err != nil {
			return nil, err
		}
		if req, ok, err := v.DeviceAlltoAllv(c, d, send, sendLen, recv, recvLen, sc, sd, rc, rd); ok || err != nil {
			return req, err
		}
		// recvbuff is read too: the gaps between the blocks written must keep what the
		// device holds when it is staged back.
		b, err := v.Get(d, devroute.In("sendbuff", send, sendLen), devroute.InOut("recvbuff", recv, recvLen))
		if err != nil {
			return nil, err
		}
		return c.AlltoAllv(b[0], sc, sd, b[1], rc, rd, d, v.Opts()...)
	})
}

//export goncclReduce
func goncclReduce(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return reduce(send, recv, count, dt, op, root, h, stream, nil, false)
}

//export goncclReduceAsync
func goncclReduceAsync(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return reduce(send, recv, count, dt, op, root, h, stream, out, true)
}

//export goncclReduceScatter
func goncclReduceScatter(send, recv unsafe.Pointer, recvCount C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return reduceScatter(send, recv, recvCount, dt, op, h, stream, nil, false)
}

//export goncclReduceScatterAsync
func goncclReduceScatterAsync(send, recv unsafe.Pointer, recvCount C.size_t, dt C.goncclDataType_t, op C.goncclRedOp_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return reduceScatter(send, recv, recvCount, dt, op, h, stream, out, true)
}

//export goncclGather
func goncclGather(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return gather(send, recv, count, dt, root, h, stream, nil, false)
}

//export goncclGatherAsync
func goncclGatherAsync(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return gather(send, recv, count, dt, root, h, stream, out, true)
}

//export goncclScatter
func goncclScatter(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return scatter(send, recv, count, dt, root, h, stream, nil, false)
}

//export goncclScatterAsync
func goncclScatterAsync(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, root C.int,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return scatter(send, recv, count, dt, root, h, stream, out, true)
}

//export goncclAlltoAll
func goncclAlltoAll(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t,
	h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return alltoAll(send, recv, count, dt, h, stream, nil, false)
}

//export goncclAlltoAllAsync
func goncclAlltoAllAsync(send, recv unsafe.Pointer, count C.size_t, dt C.goncclDataType_t,
	h C.goncclComm_t, stream C.goncclStream_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return alltoAll(send, recv, count, dt, h, stream, out, true)
}

//export goncclAlltoAllv
func goncclAlltoAllv(send unsafe.Pointer, sendCounts, sendDispls *C.size_t, recv unsafe.Pointer,
	recvCounts, recvDispls *C.size_t, dt C.goncclDataType_t, h C.goncclComm_t, stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	return alltoAllv(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, dt, h, stream, nil, false)
}

//export goncclAlltoAllvAsync
func goncclAlltoAllvAsync(send unsafe.Pointer, sendCounts, sendDispls *C.size_t, recv unsafe.Pointer,
	recvCounts, recvDispls *C.size_t, dt C.goncclDataType_t, h C.goncclComm_t, stream C.goncclStream_t,
	out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return alltoAllv(send, sendCounts, sendDispls, recv, recvCounts, recvDispls, dt, h, stream, out, true)
}
