package devroute

import (
	"fmt"
	"time"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/staged"
	"github.com/gonccl/gonccl/internal/route"
)

// The staged path pipelined by chunk: a collective on device buffers larger than one
// chunk runs as one host operation per chunk (each rank splits it the same way, so
// peers see the same sequence), staged by staged.Pool.StageChunked: the copies to the
// host of later chunks and the copies back of earlier ones run while the host (and the
// network) works on a chunk.

// stagedChunkBytes is the chunk of the pipelined staged path where it is taken without
// a GONCCL_STAGED_CHUNK of its own: under GONCCL_DEVICE_PATH=model, or under auto where
// the GPU check has proven it on the ranks' setup.
const stagedChunkBytes = 4 << 20

// maxStagedChunks bounds the chunks of one operation: a larger one takes larger chunks
// (each chunk is one operation in the communicator's queue, with its frames).
const maxStagedChunks = 64

// stagedChunk is the chunk size of the communicator's staged operations: 0 (no
// pipelining) unless GONCCL_STAGED_CHUNK asks for one by name, the mode is model, or
// the table proves the pipelined staged path on the ranks' setup (pipelinedLocked).
func (e *Comm) stagedChunk() (int, error) {
	e.devMu.Lock()
	defer e.devMu.Unlock()
	return e.stagedChunkLocked()
}

// stagedChunkLocked is stagedChunk with devMu held.
func (e *Comm) stagedChunkLocked() (int, error) {
	switch {
	case e.set.StagedChunkSet:
		return e.set.StagedChunk, nil
	case e.devMode == devModel, e.devSetupKnown && route.IsProven(e.devSetup, route.RoutePipelined):
		return stagedChunkBytes, nil
	}
	return 0, nil
}

// pipelined reports whether the communicator's staged operations are pipelined by
// chunk (devMu held); false for a setting it cannot read, which its first staged
// operation refuses.
func (e *Comm) pipelined() bool {
	n, err := e.stagedChunkLocked()
	return err == nil && n > 0
}

// stagedPlan returns the elements per block in one chunk of an operation of count
// elements per block of dt whose largest buffer holds maxBlocks blocks, and how many
// chunks that makes; 1 chunk: not pipelined. It depends only on what every rank of
// the operation agrees on (and the setting, which must be the same on every rank).
func stagedPlan(count int, dt core.DataType, maxBlocks, chunk int) (per, n int) {
	if chunk <= 0 || count <= 0 {
		return count, 1
	}
	per = max(1, chunk/(dt.Size()*max(1, maxBlocks)))
	if staged.ChunkCount(count, per) > maxStagedChunks {
		per = (count + maxStagedChunks - 1) / maxStagedChunks
	}
	return per, staged.ChunkCount(count, per)
}

// chunkOp issues the host operation of one chunk: bufs' host memory (in the order
// given to collective), its element count per block, and the options to pass to core.
type chunkOp func(b [][]byte, count int, opts []core.OpOption) (*core.Request, error)

// collective issues a collective of count elements per block whose buffers bufs hold
// blocks[i] blocks each (1, or the number of ranks): on host memory directly; on device
// memory staged through pinned host memory, pipelined by chunk when it is larger than
// one.
func (v *Views) collective(c *core.Comm, dt core.DataType, count int, blocks []int, issue chunkOp, bufs ...buf) (*core.Request, error) {
	per, n := 0, 1
	if v.stream != 0 && !v.p2p {
		chunk, err := v.e.stagedChunk()
		if err != nil {
			return nil, err
		}
		per, n = stagedPlan(count, dt, slicesMax(blocks), chunk)
	}
	if n < 2 {
		b, err := v.Get(dt, bufs...)
		if err != nil {
			return nil, err
		}
		return issue(b, count, v.opts)
	}
	limit := v.e.set.StagedPinned
	pieces, err := v.pieces(dt, blocks, bufs)
	if err != nil {
		return nil, err
	}
	pool, err := v.e.stagingPool(v.drv)
	if err != nil {
		return nil, err
	}
	st, err := pool.StageChunked(v.ctx, v.stream, pieces, count, dt.Size(), per, limit)
	if err != nil {
		return nil, err
	}
	return v.issueChunks(st, n, func(k int, before func(time.Time) error, group core.OpOption) ([]*core.Request, error) {
		opts := []core.OpOption{
			core.WithHooks(core.Hooks{Before: before, After: func(err error) error { return st.AfterChunk(k, err) }}),
			core.WithWireCount(count), group,
		}
		lo := k * per
		req, err := issue(st.ChunkHost(k), min(count, lo+per)-lo, opts)
		if err != nil {
			return nil, err
		}
		return []*core.Request{req}, nil
	})
}

// pieces checks the device buffers of a pipelined operation and describes them.
func (v *Views) pieces(dt core.DataType, blocks []int, bufs []buf) ([]staged.Piece, error) {
	sizes, err := v.deviceBufs(dt, bufs)
	if err != nil {
		return nil, err
	}
	pieces := make([]staged.Piece, len(bufs))
	for i, b := range bufs {
		if sizes[i] > 0 {
			pieces[i] = staged.Piece{Name: b.name, Ptr: uintptr(b.p), Blocks: blocks[i], In: b.in, Out: b.out}
		}
	}
	return pieces, nil
}

// issueChunks issues the host operations of st's n chunks, in order: issue(k, before,
// group) issues chunk k's, the first of which must run before (it waits for chunk k's
// copies to the host, and for chunk 0 first for the operations issued before it on the
// stream), each given group: the flight recorder shows them as one entry, the caller's
// collective (the first operation issued describes it: a chunk, whose frames carry the
// whole count, or the GPU reduction's one-element operation of the caller's kind). It
// returns one request for the whole operation: it completes with the last host
// operation (they run in issue order), with the first one's error.
func (v *Views) issueChunks(st *staged.Staging, n int, issue func(k int, before func(time.Time) error, group core.OpOption) ([]*core.Request, error)) (*core.Request, error) {
	v.staging = st
	g := core.NewTraceGroup(n)
	group := core.WithTraceGroup(g)
	dev := v.e.afterDevice()
	var reqs []*core.Request
	for k := 0; k < n; k++ {
		before := func(deadline time.Time) error { return st.BeforeChunk(k, deadline) }
		if k == 0 && dev != nil {
			// A device-path operation issued before this one is still waiting to enqueue.
			before = func(deadline time.Time) error {
				if err := waitChan(dev, deadline); err != nil {
					return err
				}
				return st.BeforeChunk(0, deadline)
			}
		}
		rs, err := issue(k, before, group)
		reqs = append(reqs, rs...)
		if err != nil {
			g.SetIssued(len(reqs))
			if len(reqs) > 0 {
				// The operations issued run (the peers expect them); the staging
				// finishes after them and is no longer this call's to cancel.
				_ = st.SetIssued(len(reqs))
				v.staging = nil
			}
			return nil, err
		}
	}
	g.SetIssued(len(reqs))
	if err := st.SetIssued(len(reqs)); err != nil {
		v.staging = nil // every operation ran already; only recording the event failed
		return nil, err
	}
	whole, complete := core.PendingRequest()
	reqs[len(reqs)-1].OnComplete(func(err error) {
		for _, r := range reqs[:len(reqs)-1] {
			if _, e := r.Test(); e != nil {
				err = e
				break
			}
		}
		complete(err)
	})
	return whole, nil
}

func slicesMax(a []int) int {
	m := 0
	for _, x := range a {
		m = max(m, x)
	}
	return m
}

// reductionStaged runs a reduction (all_reduce, reduce_scatter, reduce: kind) of count
// elements per block, whose buffers hold blocks[i] blocks: on host memory, or staged and
// pipelined by chunk with the reduction on the CPU (onHost: collective), or, for device
// buffers of a pipelined size on several ranks, with the reduction on the GPU
// (staged.Pool.StageReduceGPU). Its caller (Run) has run core's checks.
func (v *Views) reductionStaged(c *core.Comm, kind staged.GPUReduceKind, d core.DataType, rop core.RedOp, root, count int, blocks []int,
	onHost func() (*core.Request, error), sb, rb buf) (*core.Request, error) {
	if v.stream == 0 || c.Size() < 2 {
		return onHost()
	}
	gpu := v.e.set.StagedReduce != "cpu"
	chunk, err := v.e.stagedChunk()
	if err != nil {
		return nil, err
	}
	per, n := stagedPlan(count, d, slicesMax(blocks), chunk)
	if !gpu || n < 2 {
		return onHost()
	}
	limit := v.e.set.StagedPinned
	k, err := v.kernels()
	if err != nil {
		return nil, fmt.Errorf("the staged path reduces on the GPU (GONCCL_STAGED_REDUCE=cpu reduces on the host): %w", err)
	}
	pieces, err := v.pieces(d, blocks, []buf{sb, rb})
	if err != nil {
		return nil, err
	}
	pool, err := v.e.stagingPool(v.drv)
	if err != nil {
		return nil, err
	}
	st, err := pool.StageReduceGPU(v.ctx, v.stream, k, kind, pieces[0].Ptr, pieces[1].Ptr, count, d, rop, per, limit, c.Rank(), c.Size(), root)
	if err != nil {
		return nil, err
	}
	return v.issueChunks(st, n, func(i int, before func(time.Time) error, group core.OpOption) ([]*core.Request, error) {
		var reqs []*core.Request
		if i == 0 {
			// The all-to-alls' frames carry their own pairs' counts, not the operation's:
			// a one-element operation of the caller's kind whose frames carry its count
			// goes first, so that ranks that disagree on the operation fail there, as on
			// the host path, before anything is copied back.
			req, err := guardOp(c, kind, d, rop, root, count, core.WithHooks(core.Hooks{After: st.AfterOther}), group)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, req)
		}
		steps := []staged.Step{st.ReduceStep(i)}
		if kind == staged.GPUAllReduce {
			steps = append(steps, st.GatherStep(i))
		}
		for j, step := range steps {
			h := core.Hooks{Before: before, After: func(err error) error { return st.AfterReduce(i, err) }}
			if j == 1 {
				h = core.Hooks{Before: func(deadline time.Time) error { return st.BeforeGather(i, deadline) },
					After: func(err error) error { return st.AfterGather(i, err) }}
			}
			req, err := c.AlltoAllv(step.Send, step.SendCounts, step.SendDispls, step.Recv, step.RecvCounts, step.RecvDispls, d, core.WithHooks(h), group)
			if err != nil {
				return reqs, err
			}
			reqs = append(reqs, req)
		}
		return reqs, nil
	})
}

// guardOp issues a one-element reduction of kind whose frames carry count (see
// core.WithWireCount): peers that called something else fail it with a mismatch that
// names both calls.
func guardOp(c *core.Comm, kind staged.GPUReduceKind, d core.DataType, rop core.RedOp, root, count int, hooks, group core.OpOption) (*core.Request, error) {
	es := d.Size()
	send, recv := make([]byte, c.Size()*es), make([]byte, es)
	wire := core.WithWireCount(count)
	switch kind {
	case staged.GPUReduceScatter:
		return c.ReduceScatter(send, recv, 1, d, rop, wire, hooks, group)
	case staged.GPUReduce:
		return c.Reduce(send[:es], recv, 1, d, rop, root, wire, hooks, group)
	}
	return c.AllReduce(send[:es], recv, 1, d, rop, wire, hooks, group)
}
