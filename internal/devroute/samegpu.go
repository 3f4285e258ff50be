package devroute

import (
	"errors"
	"fmt"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/cuda/samegpu"
	"github.com/gonccl/gonccl/internal/route"
)

// The same-GPU path of the C ABI: when every rank of the communicator runs on one GPU,
// all_reduce, all_gather, reduce_scatter and broadcast can run through samegpu.SameGPU (the
// launcher enqueues the whole operation; the hosts meet, the streams order each other).
// GONCCL_DEVICE_PATH=samegpu takes it for those four at every size and stages the other
// operations; under auto (devauto.go) it is set up when the cost model chooses it for
// some size, and each operation takes it where the model says. Ranks spread over
// several GPUs with two on one never take it.

// sameGPUState is the part of Comm that belongs to the same-GPU path. Guarded by
// devMu.
type sameGPUState struct {
	devSame *samegpu.SameGPU // nil: not on the same-GPU path
}

// setupSameGPU is devicePath's choice when NewShared refused because ranks share a
// GPU (why): every rank got that answer together, so every rank calls it and takes
// the same-GPU path or stages, together. devMu held.
func (v *Views) setupSameGPU(c *core.Comm, why error) error {
	e := v.e
	k, kerr := v.kernels()
	g, err := samegpu.NewSameGPU(v.drv, v.ctx, c.Rank(), c.Size(), e.comm.Timeout(), func(rec []byte) ([]byte, error) {
		if kerr != nil { // tell the others this rank cannot take the path
			rec = make([]byte, len(rec))
		}
		return HostAllGather(c, rec)
	})
	if err == nil && kerr != nil {
		g.Close()
		err = kerr
	}
	// All or nothing: a rank that could not connect (samegpu.ErrRefused, or anything
	// else) makes every rank stage, rather than erring alone while the others wait.
	reason := ""
	if err != nil {
		reason = err.Error()
	}
	all, who, aerr := route.Agree(route.HostGather(c), err == nil, reason)
	if aerr != nil {
		if g != nil && err == nil {
			g.Close()
		}
		return fmt.Errorf("agreeing on the same-GPU path's setup: %w", aerr)
	}
	if !all {
		if g != nil && err == nil {
			g.Close()
		}
		if err == nil {
			err = errors.New(who)
		}
		logDevice(c, fmt.Sprintf("staged path: %v; waiting on the GPU would hold it from the other rank's compute (GONCCL_DEVICE_PATH=1 takes the device path anyway), and the same-GPU path is not set up: %s (%v)", why, who, err))
		return nil
	}
	g.Watch(c.Err) // a dead, stopped or aborted rank ends every wait, not the timeout
	e.devSame, e.devKernels, e.devCtx = g, k, v.ctx
	logDevice(c, fmt.Sprintf("same-GPU path: all %d ranks run on one GPU (%v; GONCCL_DEVICE_PATH=samegpu); all_reduce, all_gather, reduce_scatter and broadcast are enqueued by rank 0 through IPC mappings of the ranks' buffers, the hosts meeting once per operation and the streams ordering each other (stream waits on shared pages: calls return before the kernels run; without MPS a waiting stream may keep the GPU's turn up to a time slice); other operations stage", c.Size(), why))
	return nil
}

// trySameGPU runs a collective on the same-GPU path if the communicator takes it
// (ok); its caller has run core's checks (core.Comm.CheckOp). kind and count are for the flight
// recorder; enqueue gets the buffers' pointers in the order of bufs.
func (v *Views) trySameGPU(c *core.Comm, kind core.Kind, dt core.DataType, op *core.RedOp, root, count int,
	enqueue func(g *samegpu.SameGPU, k *kernels.Kernels, ptrs []uintptr) error, bufs ...buf) (req *core.Request, ok bool, err error) {
	if v.stream == 0 || !v.e.devMode.automatic() || v.e.devModeErr != nil || c.Size() == 1 {
		return nil, false, nil
	}
	if _, _, err := v.devicePath(c); err != nil {
		return nil, false, err
	}
	e := v.e
	e.devMu.Lock()
	g, k := e.devSame, e.devKernels
	e.devMu.Unlock()
	if g == nil || !e.autoChooses(route.SameGPU, kind, count*dt.Size()) {
		return nil, false, nil
	}
	if v.ctx != e.devCtx {
		return nil, false, fmt.Errorf("%w: the communicator's same-GPU operations run in the context of its GPU, and this stream belongs to another context: use streams of one device per communicator", errUsage)
	}
	rec := devRecord{kind: kind, root: -1, count: count}
	if op != nil {
		rec.redop = *op
	}
	if root != noRoot {
		rec.root = root
	}
	req, err = v.runDevice(c, rec, dt, func(ptrs []uintptr) error {
		err := enqueue(g, k, ptrs)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, samegpu.ErrSameGPUMismatch):
			// Every rank saw it in the same operation: the path goes on.
			return fmt.Errorf("%w: %w", core.ErrMismatch, err)
		case errors.Is(err, samegpu.ErrSameGPUTimeout):
			err = fmt.Errorf("%w: %w", core.ErrTimeout, err)
		}
		// The ranks' sequence numbers may disagree now: the communicator is broken,
		// and its next call says why.
		c.FailDevice(err)
		return err
	}, bufs...)
	return req, true, err
}

// closeSameGPU closes the same-GPU path on destroy or abort: this rank's mappings
// and pages (the launcher first waits for its last operation's kernels).
func (e *Comm) closeSameGPU() error {
	e.devMu.Lock()
	g := e.devSame
	e.devSame = nil
	e.devMu.Unlock()
	if g == nil {
		return nil
	}
	return g.Close()
}
