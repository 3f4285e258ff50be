package devroute

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// buf is one buffer argument of an operation.
type buf struct {
	name    string         // "" for a buffer the operation does not use on this rank
	p       unsafe.Pointer // host pointer, or a device pointer with a stream
	n       uint64         // elements
	in, out bool           // read, written by the operation
}

// views turns an operation's buffer arguments into the byte slices core runs on. With
// no stream they are the caller's host memory. With a stream they are device pointers:
// views then stages them through the communicator's pinned pool (package cuda) and
// hooks the copies around the operation on the executor.
type Views struct {
	e       *Comm
	stream  driver.Stream // 0: host buffers
	drv     *driver.Driver
	ctx     driver.Context
	dev     int             // the stream's device
	staging *staged.Staging // set by get with a stream
	opts    []core.OpOption
	p2p     bool   // point-to-point: staged outside the stream's issue order
	group   *Group // point-to-point in a group: the group's held device-path operations
}

// SetP2P marks the call a send or receive, in group g (nil: none): staged outside
// the stream's issue order, and on the device path held until the group's end.
func (v *Views) SetP2P(g *Group) { v.p2p, v.group = true, g }

// Staging is the call's staging of device buffers (nil for host buffers, and for the
// device paths but where a request's stream event comes from it).
func (v *Views) Staging() *staged.Staging { return v.staging }

// WaitedAtOnce says the caller waits for the call's request at once on its own
// goroutine (a blocking C ABI call): for host buffers, core then leaves the executor
// asleep (core.WaitedAtOnce).
func (v *Views) WaitedAtOnce() {
	if v.stream == 0 {
		v.opts = append(v.opts, core.WaitedAtOnce())
	}
}

// Opts are the options that hook a staged call's copies around core's operation.
func (v *Views) Opts() []core.OpOption { return v.opts }

// NewViews prepares the buffer views of one call on r's communicator: host memory
// when stream is 0, else device memory the stream's work reads and writes. With a
// stream it loads CUDA and finds the stream's context (on the calling thread, where
// it is current).
func NewViews(r *Comm, stream driver.Stream) (*Views, error) {
	v := &Views{e: r}
	if stream == 0 {
		return v, nil
	}
	drv, err := driver.Default()
	if err != nil {
		return nil, fmt.Errorf("%w: stream given but CUDA is not available: %w", errUsage, err)
	}
	return newViews(r, drv, stream)
}

// newViews is NewViews with the driver drv and a stream.
func newViews(r *Comm, drv *driver.Driver, stream driver.Stream) (*Views, error) {
	v := &Views{e: r}
	var err error
	v.drv, v.stream = drv, stream
	if v.stream == driver.StreamPerThread {
		return nil, errPerThread
	}
	if v.ctx, err = drv.StreamContext(v.stream); err != nil {
		return nil, fmt.Errorf("stream %#x: %w", uintptr(stream), err)
	}
	if err := CheckStream(drv, v.stream); err != nil {
		return nil, err
	}
	if v.dev, err = drv.ContextDevice(v.ctx); err != nil {
		return nil, fmt.Errorf("stream %#x: %w", uintptr(stream), err)
	}
	return v, nil
}

var errPerThread = fmt.Errorf("%w: stream is cudaStreamPerThread, which names a different stream on each thread, and gonccl queues the copies from its own threads; pass an explicit stream (e.g. one from cudaStreamCreate) or cudaStreamLegacy", errUsage)

// checkStream refuses, on the calling thread, the streams gonccl cannot queue an
// operation's copies on: cudaStreamPerThread (the copies run on gonccl's threads,
// where that handle names another stream) and a stream under CUDA graph capture (the
// staging waits on the host for the copies, which a graph being captured never runs).
func CheckStream(drv *driver.Driver, s driver.Stream) error {
	return CheckStreamOn(drv, s, -1)
}

// checkStreamOn is checkStream for a stream of device dev (-1: of the calling thread's
// current context, which a special handle then needs).
func CheckStreamOn(drv *driver.Driver, s driver.Stream, dev int) error {
	if s == driver.StreamPerThread {
		return errPerThread
	}
	var capturing bool
	var err error
	if dev >= 0 {
		capturing, err = drv.StreamCapturingOn(s, dev)
	} else {
		capturing, err = drv.StreamCapturing(s)
	}
	if err != nil {
		return fmt.Errorf("stream %#x: %w", uintptr(s), err)
	}
	if capturing {
		return fmt.Errorf("%w: stream %#x is being captured into a CUDA graph; gonccl stages device buffers through host memory and waits on the host, which cannot be captured: issue the operation outside the capture", errUsage, uintptr(s))
	}
	return nil
}

// deviceBufs checks the device buffers bufs of an operation of dt and returns their
// sizes in bytes (0 for an unused or empty one). Both ends of each must be device
// memory of the stream's device that CUDA knows: a bad buffer is refused here, on the
// caller's thread, rather than failing the collective on every rank.
func (v *Views) deviceBufs(dt core.DataType, bufs []buf) ([]int, error) {
	sizes := make([]int, len(bufs))
	for i, b := range bufs {
		if b.name == "" {
			continue
		}
		size, err := bufBytes(b.name, b.p, b.n, dt)
		if err != nil {
			return nil, err
		}
		if size > 0 {
			if err := v.checkDevice(b, size); err != nil {
				return nil, err
			}
		}
		sizes[i] = size
	}
	return sizes, nil
}

// Get returns the byte slices for bufs, in order (nil for an unused one).
func (v *Views) Get(dt core.DataType, bufs ...buf) ([][]byte, error) {
	out := make([][]byte, len(bufs))
	if v.stream == 0 {
		for i, b := range bufs {
			if b.name == "" {
				continue
			}
			var err error
			if out[i], err = HostBytes(b.name, b.p, b.n, dt); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	sizes, err := v.deviceBufs(dt, bufs)
	if err != nil {
		return nil, err
	}
	regions := make([]staged.Region, len(bufs))
	for i, b := range bufs {
		if sizes[i] > 0 {
			regions[i] = staged.Region{Name: b.name, Ptr: uintptr(b.p), Bytes: sizes[i], In: b.in, Out: b.out}
		}
	}
	pool, err := v.e.stagingPool(v.drv)
	if err != nil {
		return nil, err
	}
	stage := pool.Stage
	if v.p2p {
		stage = pool.StageUnordered
	}
	st, err := stage(v.ctx, v.stream, regions)
	if err != nil {
		return nil, err
	}
	v.staging = st
	before := st.Before
	if dev := v.e.afterDevice(); dev != nil {
		// A device-path operation issued before this one is still waiting to enqueue.
		before = func(deadline time.Time) error {
			if err := waitChan(dev, deadline); err != nil {
				return err
			}
			return st.Before(deadline)
		}
	}
	v.opts = []core.OpOption{core.WithHooks(core.Hooks{Before: before, After: st.After})}
	for i, b := range bufs {
		if b.name != "" {
			out[i] = st.Host[i]
		}
	}
	return out, nil
}

// CopyIn stages the inputs of an operation that does not run on the executor (a
// send) now, on the calling thread, waiting for the copies.
func (v *Views) CopyIn() error {
	if v.staging == nil {
		return nil
	}
	deadline := time.Now().Add(v.e.comm.Timeout())
	if dev := v.e.afterDevice(); dev != nil {
		if err := waitChan(dev, deadline); err != nil {
			return err
		}
	}
	return v.staging.CopyIn(deadline)
}

// Then returns req, or for staged device buffers a request that completes once req
// has and the staging has finished (the results copied to the device, for a recv):
// for operations that do not run on the executor, which runs the hooks of the others.
func (v *Views) Then(req *core.Request) *core.Request {
	if v.staging == nil {
		return req
	}
	return req.Then(v.staging.After)
}

// Cancel releases the staging of an operation that was not issued.
func (v *Views) Cancel() {
	if v.staging != nil {
		v.staging.Cancel()
	}
}

// waitChan waits for ch to be closed, until deadline.
func waitChan(ch chan struct{}, deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return fmt.Errorf("gonccl: a device-path operation issued before this one did not enqueue its work in time")
	}
}

// stagingPool returns the communicator's pinned staging pool, creating it on first use.
func (e *Comm) stagingPool(d *driver.Driver) (*staged.Pool, error) {
	e.poolMu.Lock()
	defer e.poolMu.Unlock()
	if e.poolClosed {
		return nil, fmt.Errorf("gonccl: %w", core.ErrClosed)
	}
	if e.pool == nil {
		e.pool = staged.NewPool(d)
	}
	return e.pool, nil
}

// closePool frees the pinned staging memory once every operation has finished.
// The wait happens after poolMu is released: an issuer that takes poolMu meanwhile
// finds the pool closed at once instead of waiting out the timeout.
// Then it gives back the reduction kernels the communicator held (releaseKernels).
func (e *Comm) closePool() error {
	e.poolMu.Lock()
	e.poolClosed = true
	pool := e.pool
	e.pool = nil
	e.poolMu.Unlock()
	if pool == nil {
		return e.releaseKernels()
	}
	if err := pool.Close(e.comm.Timeout()); err != nil {
		e.keepKernels() // operations that did not finish may still launch them
		return errors.Join(err, e.releaseKernels())
	}
	return e.releaseKernels()
}

// poolState is the part of Comm that belongs to the CUDA path.
type poolState struct {
	poolMu     sync.Mutex
	pool       *staged.Pool
	poolClosed bool
}

// HostBytes views n elements of dt at p as a byte slice (no copy). A NULL pointer is
// allowed only for zero elements.
func HostBytes(what string, p unsafe.Pointer, n uint64, dt core.DataType) ([]byte, error) {
	size, err := bufBytes(what, p, n, dt)
	if err != nil {
		return nil, err
	}
	if size == 0 {
		return []byte{}, nil
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// bufBytes checks a buffer argument of n elements of dt (a valid type: see dataType)
// at p and returns its size in bytes. A NULL pointer is allowed only for zero elements.
// Core bounds every buffer by MaxBufferBytes too, but only once it holds a slice: these
// checks guard the slice capi makes from the caller's pointer (unsafe.Slice), and the
// device range it stages, before core sees either.
func bufBytes(what string, p unsafe.Pointer, n uint64, dt core.DataType) (int, error) {
	es := uint64(dt.Size())
	if n > core.MaxBufferBytes/es {
		return 0, fmt.Errorf("%w: %s: count %d x %s (%d bytes each) overflows: more than the %d bytes any buffer can hold",
			core.ErrInvalidArgument, what, n, dt, es, uint64(core.MaxBufferBytes))
	}
	if n > 0 && p == nil {
		return 0, fmt.Errorf("%w: %s is NULL", core.ErrInvalidArgument, what)
	}
	size := n * es
	if end := uintptr(p) + uintptr(size); end < uintptr(p) {
		return 0, fmt.Errorf("%w: %s %p + %d bytes wraps around the address space", core.ErrInvalidArgument, what, p, size)
	}
	return int(size), nil
}
