package devroute

import (
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/cuda/samegpu"
	"github.com/gonccl/gonccl/cuda/staged"
	"github.com/gonccl/gonccl/internal/route"
)

// Op is one collective as the router runs it.
type Op struct {
	Kind  core.Kind
	Type  core.DataType
	RedOp *core.RedOp // the reduction; nil for a collective without one
	Root  int         // core.NoRoot for a collective without one
	Count int         // elements per block, as core counts them
	// Send and Recv are the buffers; a zero Buf for one the call does not use on
	// this rank. Blocks says how many blocks of Count elements each holds (1, or the
	// number of ranks), for the staged path's chunks.
	Send, Recv Buf
	Blocks     [2]int
	// Host runs the operation on core over host memory: the caller's, or the staged
	// copies of device buffers (b in the order Send, Recv; n elements per block).
	Host func(b [][]byte, n int, opts []core.OpOption) (*core.Request, error)
}

// Run runs op on the first path that applies to it, in the order the communicator's
// paths are priced (the route package's cost model, among the paths the settings and
// the proven table allow): the same-GPU path, the device path, the staged path with
// its reduction on the GPU, the staged path (or, for host buffers, core at once).
// Core's checks of the operation run once, before any path is tried.
func (v *Views) Run(c *core.Comm, op Op) (*core.Request, error) {
	bufs := []buf{op.Send, op.Recv}
	if op.Kind == core.KindBarrier {
		bufs = nil
	}
	if v.stream != 0 {
		if v.e.devModeErr != nil {
			return nil, v.e.devModeErr
		}
		if err := c.CheckOp(op.Kind, op.Type, op.RedOp, op.Root); err != nil {
			return nil, err
		}
		if g := sameGPUEnqueue(v, op); g != nil {
			if req, ok, err := v.trySameGPU(c, op.Kind, op.Type, op.RedOp, op.Root, op.Count, g, bufs...); ok || err != nil {
				return req, err
			}
		}
		if d := deviceEnqueue(v, op); d != nil {
			if req, ok, err := v.tryDevice(c, op.Kind, op.Type, op.RedOp, op.Root, op.Count, d, bufs...); ok || err != nil {
				return req, err
			}
		}
	}
	host := func() (*core.Request, error) {
		return v.collective(c, op.Type, op.Count, op.Blocks[:len(bufs)], op.Host, bufs...)
	}
	if kind, ok := gpuReduceKind(op.Kind); ok {
		return v.reductionStaged(c, kind, op.Type, *op.RedOp, op.Root, op.Count, op.Blocks[:], host, op.Send, op.Recv)
	}
	return host()
}

// gpuReduceKind is the staged path's GPU reduction for kind, if it has one.
func gpuReduceKind(k core.Kind) (staged.GPUReduceKind, bool) {
	switch k {
	case core.KindAllReduce:
		return staged.GPUAllReduce, true
	case core.KindReduceScatter:
		return staged.GPUReduceScatter, true
	case core.KindReduce:
		return staged.GPUReduce, true
	}
	return 0, false
}

// sameGPUEnqueue is what the same-GPU path enqueues for op, nil for a kind it does
// not run.
func sameGPUEnqueue(v *Views, op Op) func(g *samegpu.SameGPU, k *kernels.Kernels, p []uintptr) error {
	n, d, bytes := op.Count, op.Type, op.Count*op.Type.Size()
	switch op.Kind {
	case core.KindAllReduce:
		return func(g *samegpu.SameGPU, k *kernels.Kernels, p []uintptr) error {
			return g.AllReduce(v.stream, k, p[0], p[1], n, d, *op.RedOp)
		}
	case core.KindReduceScatter:
		return func(g *samegpu.SameGPU, k *kernels.Kernels, p []uintptr) error {
			return g.ReduceScatter(v.stream, k, p[0], p[1], n, d, *op.RedOp)
		}
	case core.KindBroadcast:
		return func(g *samegpu.SameGPU, _ *kernels.Kernels, p []uintptr) error {
			return g.Broadcast(v.stream, p[0], p[1], bytes, op.Root)
		}
	case core.KindAllGather:
		return func(g *samegpu.SameGPU, _ *kernels.Kernels, p []uintptr) error {
			return g.AllGather(v.stream, p[0], p[1], bytes)
		}
	}
	return nil
}

// deviceEnqueue is what the device path enqueues for op, nil for a kind it does not
// run.
func deviceEnqueue(v *Views, op Op) func(sh *cuda.Shared, k *kernels.Kernels, p []uintptr) error {
	n, d, bytes, root := op.Count, op.Type, op.Count*op.Type.Size(), op.Root
	switch op.Kind {
	case core.KindAllReduce:
		return func(sh *cuda.Shared, k *kernels.Kernels, p []uintptr) error {
			if route.DeviceRing(v.e.comm.Size(), bytes, v.e.devRingTo) {
				return sh.AllReduceRing(v.stream, k, p[0], p[1], n, d, *op.RedOp)
			}
			return sh.AllReduce(v.stream, k, p[0], p[1], n, d, *op.RedOp)
		}
	case core.KindReduceScatter:
		return func(sh *cuda.Shared, k *kernels.Kernels, p []uintptr) error {
			if route.DeviceRing(v.e.comm.Size(), bytes*v.e.comm.Size(), v.e.devRingTo) {
				return sh.ReduceScatterRing(v.stream, k, p[0], p[1], n, d, *op.RedOp)
			}
			return sh.ReduceScatter(v.stream, k, p[0], p[1], n, d, *op.RedOp)
		}
	case core.KindReduce:
		return func(sh *cuda.Shared, k *kernels.Kernels, p []uintptr) error {
			return sh.Reduce(v.stream, k, p[0], p[1], n, d, *op.RedOp, root)
		}
	case core.KindBroadcast:
		return func(sh *cuda.Shared, _ *kernels.Kernels, p []uintptr) error {
			return sh.Broadcast(v.stream, p[0], p[1], bytes, root)
		}
	case core.KindAllGather:
		return func(sh *cuda.Shared, _ *kernels.Kernels, p []uintptr) error {
			return sh.AllGather(v.stream, p[0], p[1], bytes)
		}
	case core.KindGather:
		return func(sh *cuda.Shared, _ *kernels.Kernels, p []uintptr) error {
			return sh.Gather(v.stream, p[0], p[1], bytes, root)
		}
	case core.KindScatter:
		return func(sh *cuda.Shared, _ *kernels.Kernels, p []uintptr) error {
			return sh.Scatter(v.stream, p[0], p[1], bytes, root)
		}
	case core.KindAlltoAll:
		return func(sh *cuda.Shared, _ *kernels.Kernels, p []uintptr) error {
			return sh.AlltoAll(v.stream, p[0], p[1], bytes)
		}
	case core.KindBarrier:
		return func(sh *cuda.Shared, _ *kernels.Kernels, _ []uintptr) error {
			return sh.Barrier(v.stream)
		}
	}
	return nil
}

// Buf is one buffer argument of an operation; the zero Buf is one the operation does
// not use on this rank.
type Buf = buf

// In is a buffer the operation reads: n elements at p, named for messages.
func In(name string, p unsafe.Pointer, n uint64) Buf { return buf{name, p, n, true, false} }

// Out is a buffer the operation writes.
func Out(name string, p unsafe.Pointer, n uint64) Buf { return buf{name, p, n, false, true} }

// InOut is a buffer the operation reads and writes (its gaps keep what they held).
func InOut(name string, p unsafe.Pointer, n uint64) Buf { return buf{name, p, n, true, true} }
