package devroute

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/cuda/staged"
	"github.com/gonccl/gonccl/cuda/topology"
	"github.com/gonccl/gonccl/internal/route"
)

// The GPU-resident data path of the C ABI: with a stream, when every rank of the
// communicator is on this host and their devices can share memory, all_reduce,
// all_gather, broadcast, reduce, reduce_scatter, alltoall, gather and scatter are enqueued on the stream as
// device copies, reduction kernels and flags (package cuda's Shared), and the call
// returns without waiting. Everything else (alltoallv, barrier, point-to-point, ranks
// on several hosts, GONCCL_P2P_DISABLE=1) stages through pinned host memory.
//
// Which paths a communicator has is decided once, at its first operation on device
// buffers, from the settings read when it was created (devMode). By default (auto,
// devauto.go) it sets up only the paths the GPU check has proven on its ranks' setup
// (package route's table), which today is staging alone, unpipelined: while the table
// proves nothing else on any setup of several ranks, auto does not even look for the
// setup (route.StagedOnly) and sets up nothing; model sets up the
// paths its ranks' GPUs allow that the cost model (route/cost.go) chooses for some
// operation, and each collective takes the one the model prices lowest for its kind and
// size; there a communicator of one rank copies (onerank.go).
// GONCCL_DEVICE_PATH=samegpu takes the same-GPU path when every rank is on one GPU,
// else the device path unless two ranks share a GPU (cuda.StageWhenDeviceShared);
// GONCCL_DEVICE_PATH=1 takes the device path wherever it can be set up,
// GONCCL_DEVICE_PATH=0 or GONCCL_P2P_DISABLE=1 never.
// The settings must be the same on every rank, as NCCL's are: the first device
// operation of a communicator exchanges the scratch handles with a host all-gather,
// which every rank must join.
//
// Failures do not hang the GPU: see cuda/devfault.go. Each communicator's watcher
// releases its streams when a peer is lost (core's error), when an operation has been
// on the GPU past the communicator's timeout, or when the ranks' descriptors of an
// operation differ, and breaks the communicator (core.Comm.FailDevice) with an error
// naming the ranks, which the next call returns. Device send/recv are watched the same
// way (cuda/devp2pwatch.go), and their sizes compared by the hosts (core/devp2psize.go).

// devMode is how a communicator chooses the path of its operations on device buffers.
type devMode int

const (
	devAuto    devMode = iota // the paths proven on the ranks' setup, the cost model's per operation among them (the default; devauto.go)
	devOn                     // the device path wherever it can be set up: GONCCL_DEVICE_PATH=1
	devOff                    // staged: GONCCL_DEVICE_PATH=0 or GONCCL_P2P_DISABLE=1
	devSameGPU                // ranks all on one GPU take the same-GPU path, else the device path unless a GPU is shared: GONCCL_DEVICE_PATH=samegpu
	devModel                  // as auto, among every path the GPUs allow, proven or not: GONCCL_DEVICE_PATH=model
)

// automatic reports whether the mode chooses by the ranks' devices (auto, model,
// samegpu) rather than forcing the device path.
func (m devMode) automatic() bool { return m == devAuto || m == devSameGPU || m == devModel }

// byModel reports whether the mode sets up paths by the cost model (auto, model).
func (m devMode) byModel() bool { return m == devAuto || m == devModel }

// devModeOf is the mode the settings ask for, and why it is devOff (the setting).
func devModeOf(set core.DeviceSettings) (devMode, string) {
	if set.P2PDisable {
		return devOff, "GONCCL_P2P_DISABLE=1"
	}
	switch set.Path {
	case "samegpu":
		return devSameGPU, ""
	case "model":
		return devModel, ""
	case "1":
		return devOn, ""
	case "0":
		return devOff, "GONCCL_DEVICE_PATH=0"
	}
	return devAuto, ""
}

// devState is the part of Comm that belongs to the device path.
type devState struct {
	devMode    devMode // read when the communicator was created
	devOffWhy  string  // the setting that made it devOff
	devModeErr error   // a setting it could not read: the first device operation fails with it
	devMu      sync.Mutex
	devDecided bool           // the first device-capable operation has chosen
	devShared  *cuda.Shared   // nil: this communicator stages
	devCosts   route.Costs    // GONCCL_DEVICE_PATH_COST, read when the communicator was created
	devChoice  *route.Chooser // auto: the paths set up and the model choosing between them (devauto.go)
	// devSetup is the ranks' setup as auto's agreement step found it (devSetupKnown).
	devSetup      route.Setup
	devSetupKnown bool
	// devSetupFault, set by tests only, fails this rank's setup of a path after the
	// path's own exchange (as a peer's event or page it cannot open would).
	devSetupFault func(route.Path) error
	devRingTo     int // GONCCL_DEVICE_RING_THRESHOLD, read at the first device operation
	devKernels    *kernels.Kernels
	devCtx        driver.Context
	devLast       chan struct{}             // closed once the last device-path operation has enqueued its work
	devSide       map[sideKey]driver.Stream // async point-to-point's streams (devp2p.go)
	set           core.DeviceSettings       // parsed when the communicator was created
	sameGPUState
	kernelState
}

// kernelState is the reduction kernels a communicator holds (kernels.Acquire), one
// module per context it used them in, given back by closePool once no work queued with
// them can be pending.
type kernelState struct {
	kernMu   sync.Mutex
	kernHeld map[driver.Context]*kernels.Kernels
	kernKeep bool // an abort, or a device path left open: queued work may still launch them
}

// kernels returns the reduction kernels in the stream's context, held by the
// communicator from its first use there until closePool.
func (v *Views) kernels() (*kernels.Kernels, error) {
	e := v.e
	e.kernMu.Lock()
	defer e.kernMu.Unlock()
	if k := e.kernHeld[v.ctx]; k != nil {
		return k, nil
	}
	k, err := kernels.Acquire(v.drv, v.ctx)
	if err != nil {
		return nil, err
	}
	if e.kernHeld == nil {
		e.kernHeld = make(map[driver.Context]*kernels.Kernels)
	}
	e.kernHeld[v.ctx] = k
	return k, nil
}

// keepKernels marks the communicator's kernels as possibly still in use by queued work
// (an abort, a path that did not close): closePool then does not unload them.
func (e *Comm) keepKernels() {
	e.kernMu.Lock()
	e.kernKeep = true
	e.kernMu.Unlock()
}

// releaseKernels gives back the kernels the communicator holds (the last holder of a
// context's module unloads it), unless keepKernels was called.
func (e *Comm) releaseKernels() error {
	e.kernMu.Lock()
	held, keep := e.kernHeld, e.kernKeep
	e.kernHeld = nil
	e.kernMu.Unlock()
	if keep {
		return nil
	}
	var errs []error
	for _, k := range held {
		errs = append(errs, k.Release())
	}
	return errors.Join(errs...)
}

// devicePath returns the communicator's shared scratch and kernels if operations
// with stream v.stream take the device path, deciding (collectively, once) on first
// use; nil if they stage.
func (v *Views) devicePath(c *core.Comm) (*cuda.Shared, *kernels.Kernels, error) {
	e := v.e
	if v.stream == 0 || e.devMode == devOff {
		return nil, nil, nil
	}
	e.devMu.Lock()
	defer e.devMu.Unlock()
	if !e.devDecided {
		e.devDecided = true
		if !c.OneHost() {
			logDevice(c, "staged path: the ranks are on more than one host")
			return nil, nil, nil
		}
		if c.Size() == 1 && e.devMode.automatic() {
			// Nothing to share: no scratch to export, no flags, no watcher for a copy.
			e.devSetup, e.devSetupKnown = route.OneRank, true
			logDevice(c, "one rank: "+route.Verdict(route.OneRank, route.RouteOf(route.Staged, e.pipelined())))
			return nil, nil, nil
		}
		if e.devMode == devAuto && route.StagedOnly() {
			// Nothing auto could choose but staging on any setup: the default path makes
			// the driver calls that ran on hardware, and none of a setup it cannot use
			// (docs/gpu.md lists them; TestAutoDefaultPathDriverCalls holds them).
			e.devChoice = nil
			logDevice(c, "auto: "+route.StagedOnlyVerdict())
			return nil, nil, nil
		}
		scratch, ringFrom := e.set.Scratch, e.set.RingThreshold
		e.devRingTo = ringFrom
		if e.devMode.byModel() {
			e.devChoice = nil
			if err := v.setupAuto(c, scratch, topology.LocalMPS, topology.LocalNVLink); err != nil {
				return nil, nil, err
			}
			return v.devShared()
		}
		var opts []cuda.SharedOption
		if e.devMode == devSameGPU {
			opts = append(opts, cuda.StageWhenDeviceShared())
		}
		k, kerr := v.kernels()
		sh, err := cuda.NewShared(v.drv, v.ctx, c.Rank(), c.Size(), scratch, func(rec []byte) ([]byte, error) {
			if kerr != nil { // tell the others this rank cannot take the device path
				rec = make([]byte, len(rec))
			}
			return HostAllGather(c, rec)
		}, opts...)
		if err == nil && kerr != nil {
			err = kerr
		}
		if err != nil {
			if sh != nil {
				sh.Abandon()
			}
			if errors.Is(err, cuda.ErrDeviceShared) { // samegpu: auto decided above
				return nil, nil, v.setupSameGPU(c, err)
			}
			if errors.Is(err, cuda.ErrNotShared) || kerr != nil {
				logDevice(c, fmt.Sprintf("staged path: %v", err))
				return nil, nil, nil
			}
			return nil, nil, fmt.Errorf("setting up the device path: %w", err)
		}
		e.devShared, e.devKernels, e.devCtx = sh, k, v.ctx
		// A peer lost, an operation on the GPU past the timeout, ranks that disagree:
		// the watcher releases this rank's streams and breaks the communicator, so
		// the next call (and the flight recorder) names the rank (cuda/devfault.go).
		sh.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, Fail: c.FailDevice})
		logDevice(c, deviceLine(sh, c.Size(), ringFrom))
	}
	return v.devShared()
}

// deviceLine is the INIT log's line for a device path set up on sh among n ranks.
func deviceLine(sh *cuda.Shared, n, ringFrom int) string {
	msg := fmt.Sprintf("device path: same-host ranks share device memory that outlives its maker (cuMemCreate, passed as file descriptors); %d bytes of scratch on device %d; flags in host memory the GPU maps; %s", sh.Cap(), sh.Device(), cuda.HardwareQueues())
	if ringFrom > 0 && n >= 3 {
		msg += fmt.Sprintf("; all_reduce and reduce_scatter of %d bytes or more by the ring (GONCCL_DEVICE_RING_THRESHOLD)", ringFrom)
	}
	return msg
}

// devShared returns the communicator's device path, nil if it has none (devMu held),
// refusing a stream of another context than the one it was set up in.
func (v *Views) devShared() (*cuda.Shared, *kernels.Kernels, error) {
	e := v.e
	if e.devShared == nil {
		return nil, nil, nil
	}
	if v.ctx != e.devCtx {
		return nil, nil, fmt.Errorf("%w: the communicator's device-path operations run in the context of device %d, and this stream belongs to another context: use streams of one device per communicator", errUsage, e.devShared.Device())
	}
	return e.devShared, e.devKernels, nil
}

// logStagedOnce logs, at a communicator's first operation on device buffers, that
// the settings keep it on the staged path.
func (e *Comm) logStagedOnce(c *core.Comm) {
	e.devMu.Lock()
	defer e.devMu.Unlock()
	if e.devDecided {
		return
	}
	e.devDecided = true
	logDevice(c, "staged path: "+e.devOffWhy+" (device buffers go through pinned host memory)")
}

func logDevice(c *core.Comm, msg string) {
	cuda.LogInit(fmt.Sprintf("rank %d/%d: %s", c.Rank(), c.Size(), msg))
}

// HostAllGather all-gathers each rank's rec over c on the host and waits.
func HostAllGather(c *core.Comm, rec []byte) ([]byte, error) {
	all := make([]byte, len(rec)*c.Size())
	req, err := c.AllGather(rec, all, len(rec), core.Uint8)
	if err == nil {
		_, err = req.Wait(-1)
	}
	return all, err
}

// tryDevice runs a collective on the device path if it applies to this call (ok).
// Its caller has run core's checks (core.Comm.CheckOp: the reduction, if op is not
// nil, the root, unless noRoot, the communicator's state). kind and count (as core
// counts it) are for the flight recorder.
func (v *Views) tryDevice(c *core.Comm, kind core.Kind, dt core.DataType, op *core.RedOp, root, count int,
	enqueue func(sh *cuda.Shared, k *kernels.Kernels, ptrs []uintptr) error, bufs ...buf) (req *core.Request, ok bool, err error) {
	if v.stream == 0 {
		return nil, false, nil
	}
	if v.e.devModeErr != nil {
		return nil, false, v.e.devModeErr
	}
	if v.e.devMode == devOff {
		v.e.logStagedOnce(c)
		return nil, false, nil
	}
	rec := devRecord{kind: kind, root: -1, count: count}
	if op != nil {
		rec.redop = *op
	}
	if root != noRoot {
		rec.root = root
	}
	if req, ok, err := v.tryOneRankCopy(c, rec, dt, bufs); ok {
		return req, true, err
	}
	sh, k, err := v.devicePath(c)
	if err != nil || sh == nil {
		return nil, false, err
	}
	if !v.e.autoChooses(route.Device, kind, count*dt.Size()) {
		return nil, false, nil // auto: the model prices the staged path lower for this size
	}
	req, err = v.runDevice(c, rec, dt, func(ptrs []uintptr) error { return enqueue(sh, k, ptrs) }, bufs...)
	return req, true, err
}

// devRecord is what the flight recorder says of a device-path operation.
type devRecord struct {
	kind        core.Kind // 0: a group of sends and receives, p2p
	redop       core.RedOp
	root, count int
	p2p         []core.P2PRecord
	// later, if set, issues work that another goroutine enqueues afterwards (an async
	// point-to-point lane, cuda/devp2plane.go) instead of enqueue: it calls its
	// argument once the last of it is enqueued, or with why it will not be, unless it
	// returns an error. The request then completes at that call.
	later func(enqueued func(error)) error
}

// runDevice checks the device buffers bufs (as get does) and enqueues enqueue's
// work on the stream, in issue order with the communicator's staged operations,
// recording it in c's flight recorder: issued here (its sequence number, in issue
// order), on the GPU once enqueued, finished when the event recorded after its work
// completes (the recorder asks when the trace is read). The returned request has
// completed: the work is on the stream (with rec.later, once the last of it is).
func (v *Views) runDevice(c *core.Comm, rec devRecord, dt core.DataType, enqueue func(ptrs []uintptr) error, bufs ...buf) (*core.Request, error) {
	if _, err := v.deviceBufs(dt, bufs); err != nil {
		return nil, err
	}
	ptrs := make([]uintptr, len(bufs))
	for i, b := range bufs {
		if b.name != "" {
			ptrs[i] = uintptr(b.p)
		}
	}
	pool, err := v.e.stagingPool(v.drv)
	if err != nil {
		return nil, err
	}
	st, err := pool.NewDevice(v.ctx, v.stream)
	if err != nil {
		return nil, err
	}
	var dop *core.DeviceOp
	if rec.kind != 0 {
		dop, err = c.IssueDeviceOp(rec.kind, dt, rec.redop, rec.root, rec.count)
	} else if len(rec.p2p) > 0 {
		dop, err = c.IssueDeviceP2P(rec.p2p)
	}
	if err != nil {
		st.Cancel()
		return nil, err
	}
	v.staging = st
	e := v.e
	e.devMu.Lock()
	prev := e.devLast
	mine := make(chan struct{})
	e.devLast = mine
	e.devMu.Unlock()
	deadline := time.Now().Add(e.comm.Timeout())
	var laterReq *core.Request
	var laterDone func(error)
	if rec.later != nil {
		laterReq, laterDone = core.PendingRequest()
	}
	issue := func() error {
		defer close(mine)
		if err := st.BeginDevice(deadline); err != nil {
			st.Cancel()
			if dop != nil {
				dop.Failed(err)
			}
			return err
		}
		if rec.later != nil {
			return issueLater(st, dop, rec.later, laterDone)
		}
		return endDevice(st, dop, enqueue(ptrs))
	}
	if closed(prev) && pool.DeviceReady(st) {
		// The usual case: enqueue now, on the calling thread, and return.
		if err := issue(); err != nil {
			return nil, err
		}
		if laterReq != nil {
			return laterReq, nil
		}
		return core.CompletedRequest(nil), nil
	}
	// Behind a held operation (its follow-up not queued yet) or staged ones still
	// running: enqueue once they are, without blocking the caller, who may be the
	// one to release the hold.
	req, done := core.PendingRequest()
	if laterReq != nil {
		req, done = laterReq, func(err error) {
			if err != nil { // else the lane completes it
				laterDone(err)
			}
		}
	}
	go func() {
		if prev != nil {
			<-prev
		}
		done(issue())
	}()
	return req, nil
}

// endDevice ends device operation st, whose work was enqueued (err nil) or not all
// of it: records its completion event after it and tells the flight recorder (dop, if
// any); returns err, or EndDevice's.
func endDevice(st *staged.Staging, dop *core.DeviceOp, err error) error {
	if eerr := st.EndDevice(); err == nil {
		err = eerr
	}
	switch {
	case dop == nil:
	case err != nil:
		dop.Failed(err)
	default:
		dop.OnGPU(st.Done)
	}
	return err
}

// issueLater issues work enqueued later (devRecord.later) as device operation st:
// later operations need not wait for it (its stream's order is its lane's), and its
// completion event is recorded, the flight recorder told and the request completed
// (done) once the last of it is enqueued.
func issueLater(st *staged.Staging, dop *core.DeviceOp, later func(func(error)) error, done func(error)) error {
	err := later(func(err error) { done(endDevice(st, dop, err)) })
	if err != nil {
		_ = st.EndDevice()
		if dop != nil {
			dop.Failed(err)
		}
		return err
	}
	st.EndLater()
	return nil
}

// closed reports whether ch is nil or closed.
func closed(ch chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// afterDevice returns a channel closed once the device-path operations issued so far
// have enqueued their work (nil if there are none pending): staged operations wait
// for it before queueing their copies, to keep the stream in issue order.
func (e *Comm) afterDevice() chan struct{} {
	e.devMu.Lock()
	defer e.devMu.Unlock()
	if closed(e.devLast) {
		return nil
	}
	return e.devLast
}

// checkDevice refuses a buffer that is not device memory of the stream's device.
func (v *Views) checkDevice(b buf, size int) error {
	ptr := uintptr(b.p)
	for _, at := range []uintptr{ptr, ptr + uintptr(size) - 1} {
		dev, err := v.drv.PointerDevice(v.ctx, at)
		if err != nil {
			return fmt.Errorf("%w: %s %p (%d bytes) is not device memory CUDA knows: %w", core.ErrInvalidArgument, b.name, b.p, size, err)
		}
		if dev != v.dev {
			return fmt.Errorf("%w: %s %p is memory of device %d but the stream is on device %d: use a stream of the buffers' device", core.ErrInvalidArgument, b.name, b.p, dev, v.dev)
		}
	}
	return nil
}

// closeDevice frees the device scratch (collectively: see cuda.Shared.Close) on
// destroy. Abort, or a destroy of a failed communicator, releases this rank's streams
// still waiting on the device path's flags (their operations' outputs are not valid)
// and leaves the scratch mapped, as peers' streams may still read it.
func (e *Comm) closeDevice(abort bool) error {
	if abort || e.comm.Err() != nil {
		e.keepKernels() // streams may still hold kernels queued with them
	}
	if err := e.closeSameGPU(); err != nil && !abort {
		e.keepKernels()
		return err
	}
	e.devMu.Lock()
	sh := e.devShared
	e.devShared = nil
	e.devDecided = true
	side := e.takeSideStreams()
	e.devMu.Unlock()
	if sh == nil {
		return nil
	}
	if abort || e.comm.Err() != nil {
		// No collective close on a broken communicator: release this rank's streams
		// waiting on the collectives' flags, leave the scratch mapped (and the side
		// streams unused: they may wait forever on a dead peer's send/recv flags).
		why := error(core.ErrAborted)
		if !abort {
			why = e.comm.Err()
		}
		sh.Abort(why)
		return nil
	}
	err := sh.Close(e.comm.Timeout())
	if err == nil {
		returnStreams(side)
	} else {
		e.keepKernels()
	}
	return err
}
