package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/devroute"
)

// One-sided windows (gonccl.h: goncclWin*, goncclPut, goncclSignal, goncclWaitSignal):
// handles over core.Window, which does the work. A window registered on device memory
// (goncclWinRegister given a CUDA device pointer) is also a cuda.DevWindow: core keeps
// its signal counters, the DevWindow maps the ranks' device memory and queues puts.

type winEntry struct {
	win  *core.Window
	comm *commEntry

	mu  sync.Mutex
	dev *cuda.DevWindow // set while device memory is registered
}

func (e *winEntry) device() *cuda.DevWindow {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dev
}

var windows = struct {
	sync.Mutex
	next  uint64
	m     map[uint64]*winEntry
	holds map[uint64]func() // releases a hold of goncclWinMemory
}{m: map[uint64]*winEntry{}, holds: map[uint64]func(){}}

func lookupWindow(h C.goncclWindow_t) (*winEntry, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: window is NULL", core.ErrInvalidArgument)
	}
	windows.Lock()
	e := windows.m[uint64((*C.struct_goncclWindow)(unsafe.Pointer(h)).id)]
	windows.Unlock()
	if e == nil {
		return nil, fmt.Errorf("%w: window was freed or is not a gonccl window", errUsage)
	}
	return e, nil
}

//export goncclWinCreate
func goncclWinCreate(h C.goncclComm_t, out *C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	ce, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if out == nil {
		return fail(ce, fmt.Errorf("%w: goncclWinCreate: win is NULL", core.ErrInvalidArgument))
	}
	w, err := ce.comm.NewWindow()
	if err != nil {
		return fail(ce, err)
	}
	windows.Lock()
	windows.next++
	id := windows.next
	windows.m[id] = &winEntry{win: w, comm: ce}
	windows.Unlock()
	wh := (*C.struct_goncclWindow)(C.malloc(C.size_t(unsafe.Sizeof(C.struct_goncclWindow{}))))
	wh.id = C.ulonglong(id)
	*out = C.goncclWindow_t(unsafe.Pointer(wh))
	return C.goncclSuccess
}

//export goncclWinRegister
func goncclWinRegister(h C.goncclWindow_t, init unsafe.Pointer, count C.size_t, dt C.goncclDataType_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	d, err := dataType(dt)
	if err != nil {
		return fail(e.comm, err)
	}
	if es := uint64(d.Size()); uint64(count) > core.MaxBufferBytes/es {
		return fail(e.comm, fmt.Errorf("%w: goncclWinRegister: count %d x %s overflows: more than the %d bytes any buffer can hold",
			core.ErrInvalidArgument, uint64(count), d, uint64(core.MaxBufferBytes)))
	}
	if drv, dev, ok := devicePointer(init); ok {
		return e.registerDevice(drv, dev, uintptr(init), int(count), d)
	}
	var b []byte
	if init != nil {
		if b, err = devroute.HostBytes("init", init, uint64(count), d); err != nil {
			return fail(e.comm, err)
		}
	}
	if err := e.win.Register(b, int(count), d); err != nil {
		return fail(e.comm, err)
	}
	return C.goncclSuccess
}

// devicePointer reports whether p is CUDA device memory (and on which device), when
// a CUDA driver is loaded or loads.
func devicePointer(p unsafe.Pointer) (*driver.Driver, int, bool) {
	if p == nil {
		return nil, 0, false
	}
	drv, err := driver.Default()
	if err != nil {
		return nil, 0, false
	}
	dev, ok := drv.DevicePointer(uintptr(p))
	return drv, dev, ok
}

// registerDevice registers count elements of dt of device memory at ptr (on device
// dev) with the window: the memory stays the caller's and the peers map it.
func (e *winEntry) registerDevice(drv *driver.Driver, dev int, ptr uintptr, count int, dt core.DataType) C.goncclResult_t {
	c := e.comm.comm
	if err := e.win.RegisterDevice(count, dt); err != nil {
		return fail(e.comm, err)
	}
	var problem error
	for p := range c.Size() {
		if a, err := e.win.Attr(p); err != nil || a != core.AccessUnified {
			problem = fmt.Errorf("cannot map rank %d's signal counters (see the warning above)", p)
		}
	}
	dw, err := cuda.NewDevWindow(drv, dev, c.Rank(), c.Size(), ptr, count*dt.Size(), c.Timeout(), problem,
		func(rec []byte) ([]byte, error) { return devroute.HostAllGather(c, rec) })
	if err != nil {
		// Every rank got an error together: they deregister together.
		if derr := e.win.Deregister(); derr != nil {
			err = fmt.Errorf("%w (and deregistering: %v)", err, derr)
		}
		return fail(e.comm, fmt.Errorf("%w: goncclWinRegister on device memory: %w", core.ErrInvalidArgument, err))
	}
	e.mu.Lock()
	e.dev = dw
	e.mu.Unlock()
	return C.goncclSuccess
}

// closeDevice unmaps the peers' device memory (waiting for this rank's puts first).
func (e *winEntry) closeDevice() error {
	e.mu.Lock()
	dw := e.dev
	e.dev = nil
	e.mu.Unlock()
	if dw == nil {
		return nil
	}
	return dw.Close()
}

//export goncclWinDeregister
func goncclWinDeregister(h C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	// Every rank unmaps the others' device memory before the barrier in Deregister;
	// after it each may free its own.
	if err := e.closeDevice(); err != nil {
		return fail(e.comm, err)
	}
	if err := e.win.Deregister(); err != nil {
		return fail(e.comm, err)
	}
	return C.goncclSuccess
}

//export goncclWinFree
func goncclWinFree(h C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	windows.Lock()
	delete(windows.m, uint64((*C.struct_goncclWindow)(unsafe.Pointer(h)).id))
	windows.Unlock()
	err = e.closeDevice()
	if ferr := e.win.Free(); err == nil {
		err = ferr
	}
	C.free(unsafe.Pointer(h))
	if err != nil {
		return fail(e.comm, err)
	}
	return C.goncclSuccess
}

//export goncclWinGetAttr
func goncclWinGetAttr(h C.goncclWindow_t, peer C.int, access *C.goncclWinAccess_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	if access == nil {
		return fail(e.comm, fmt.Errorf("%w: goncclWinGetAttr: access is NULL", core.ErrInvalidArgument))
	}
	a, err := e.win.Attr(int(peer))
	if err != nil {
		return fail(e.comm, err)
	}
	*access = C.goncclWinAccess_t(a)
	return C.goncclSuccess
}

//export goncclWinGetInfo
func goncclWinGetInfo(h C.goncclWindow_t, rank C.int, count *C.size_t, dt *C.goncclDataType_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	if count == nil || dt == nil {
		return fail(e.comm, fmt.Errorf("%w: goncclWinGetInfo: count or datatype is NULL", core.ErrInvalidArgument))
	}
	n, d, err := e.win.Info(int(rank))
	if err != nil {
		return fail(e.comm, err)
	}
	*count, *dt = C.size_t(n), C.goncclDataType_t(d)
	return C.goncclSuccess
}

//export goncclWinMemory
func goncclWinMemory(h C.goncclWindow_t, rank C.int, ptr *unsafe.Pointer, bytes *C.size_t, hold *C.goncclWinHold_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	if ptr == nil || bytes == nil {
		return fail(e.comm, fmt.Errorf("%w: goncclWinMemory: ptr or bytes is NULL", core.ErrInvalidArgument))
	}
	release := func() {}
	if dw := e.device(); dw != nil {
		// Device memory is mapped until goncclWinDeregister, whatever the holds.
		n, dt, err := e.win.Info(int(rank))
		if err != nil {
			return fail(e.comm, err)
		}
		addr := dw.Ptr(int(rank))
		*ptr, *bytes = *(*unsafe.Pointer)(unsafe.Pointer(&addr)), C.size_t(n*dt.Size()) // a device address
	} else {
		mem, wh, err := e.win.Memory(int(rank))
		if err != nil {
			return fail(e.comm, err)
		}
		*ptr, *bytes = nil, C.size_t(len(mem))
		if len(mem) > 0 {
			*ptr = unsafe.Pointer(unsafe.SliceData(mem))
		}
		release = wh.Release
	}
	if hold == nil {
		release() // the registration's own reference keeps it until deregistered
		return C.goncclSuccess
	}
	windows.Lock()
	windows.next++
	id := windows.next
	windows.holds[id] = release
	windows.Unlock()
	*hold = C.goncclWinHold_t(id)
	return C.goncclSuccess
}

//export goncclWinHoldRelease
func goncclWinHoldRelease(hold C.goncclWinHold_t) (res C.goncclResult_t) {
	defer guard(&res)
	windows.Lock()
	wh := windows.holds[uint64(hold)]
	delete(windows.holds, uint64(hold))
	windows.Unlock()
	if wh == nil {
		return fail(nil, fmt.Errorf("%w: window hold %d was released already or never given", errUsage, uint64(hold)))
	}
	wh()
	return C.goncclSuccess
}

// winIssue runs one window operation and either hands out its request (async) or
// waits for it.
func winIssue(h C.goncclWindow_t, out *C.goncclRequest_t, async bool, start func(w *core.Window) (*core.Request, error)) C.goncclResult_t {
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	if async {
		if out == nil {
			return fail(e.comm, fmt.Errorf("%w: request is NULL", core.ErrInvalidArgument))
		}
		*out = nil
	}
	req, err := start(e.win)
	if err != nil {
		return fail(e.comm, err)
	}
	if async {
		*out = newRequestHandle(req, e.comm, nil)
		return C.goncclSuccess
	}
	if _, err := req.Wait(-1); err != nil {
		return fail(e.comm, err)
	}
	return C.goncclSuccess
}

func put(src unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer C.int, off C.size_t, h C.goncclWindow_t,
	stream *driver.Stream, out *C.goncclRequest_t, async bool) C.goncclResult_t {
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	return winIssue(h, out, async, func(w *core.Window) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		if uint64(off) > core.MaxBufferBytes || uint64(count) > core.MaxBufferBytes/uint64(d.Size()) {
			return nil, fmt.Errorf("%w: put: count %d at offset %d is past any window", core.ErrInvalidArgument, uint64(count), uint64(off))
		}
		if dw := e.device(); dw != nil {
			return putDevice(w, dw, src, int(count), d, int(peer), int(off), stream)
		}
		if stream != nil {
			return nil, fmt.Errorf("%w: goncclPutOnStream: the window holds host memory; use goncclPut", core.ErrInvalidArgument)
		}
		b, err := devroute.HostBytes("src", src, uint64(count), d)
		if err != nil {
			return nil, err
		}
		if uint64(off) > core.MaxBufferBytes {
			return nil, fmt.Errorf("%w: put: offset %d is past any window", core.ErrInvalidArgument, uint64(off))
		}
		return w.Put(b, int(count), d, int(peer), int(off))
	})
}

//export goncclPut
func goncclPut(src unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer C.int, off C.size_t, h C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	return put(src, count, dt, peer, off, h, nil, nil, false)
}

//export goncclPutAsync
func goncclPutAsync(src unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer C.int, off C.size_t, h C.goncclWindow_t,
	out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return put(src, count, dt, peer, off, h, nil, out, true)
}

//export goncclPutOnStream
func goncclPutOnStream(src unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer C.int, off C.size_t, h C.goncclWindow_t,
	stream C.goncclStream_t) (res C.goncclResult_t) {
	defer guard(&res)
	s := driver.Stream(uintptr(unsafe.Pointer(stream)))
	if s == 0 {
		s = driver.StreamLegacy // what NULL means to CUDA
	}
	return put(src, count, dt, peer, off, h, &s, nil, false)
}

// putDevice queues a put from device memory src into a device window on stream
// (nil: the legacy default stream of the window's device). The request is complete
// once the copy is queued: src may be reused by work queued after it on the stream.
func putDevice(w *core.Window, dw *cuda.DevWindow, src unsafe.Pointer, count int, dt core.DataType, peer, off int,
	stream *driver.Stream) (*core.Request, error) {
	what := fmt.Sprintf("put to rank %d's window %d", peer, w.ID())
	if err := w.CheckPut(what, count, dt, peer, off); err != nil {
		return nil, err
	}
	if count > 0 {
		drv, _, ok := devicePointer(src)
		if !ok {
			return nil, fmt.Errorf("%w: %s: the window holds device memory and src %p is not device memory CUDA knows: copy it to the device first", core.ErrInvalidArgument, what, src)
		}
		s := driver.StreamLegacy
		if stream != nil {
			s = *stream
			if err := devroute.CheckStream(drv, s); err != nil {
				return nil, err
			}
		}
		if err := dw.Put(s, uintptr(src), count*dt.Size(), peer, off*dt.Size()); err != nil {
			return nil, err
		}
	}
	return core.CompletedRequest(nil), nil
}

// signal is goncclSignal: on a device window it goes out once the puts before it
// have landed (waited for on the host, on a goroutine of its own).
func signal(e *winEntry, w *core.Window, peer int) (*core.Request, error) {
	dw := e.device()
	if dw == nil {
		return w.Signal(peer)
	}
	if peer < 0 || peer >= e.comm.comm.Size() {
		return w.Signal(peer) // core says what is wrong with it
	}
	run, err := dw.Signal(peer, time.Now().Add(e.comm.comm.Timeout()), func() error {
		req, err := w.Signal(peer)
		if err == nil {
			_, err = req.Wait(-1)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	req, done := core.PendingRequest()
	go func() { done(run()) }()
	return req, nil
}

//export goncclSignal
func goncclSignal(peer C.int, h C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	return winIssue(h, nil, false, func(w *core.Window) (*core.Request, error) { return signal(e, w, int(peer)) })
}

//export goncclSignalAsync
func goncclSignalAsync(peer C.int, h C.goncclWindow_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
	}
	return winIssue(h, out, true, func(w *core.Window) (*core.Request, error) { return signal(e, w, int(peer)) })
}

//export goncclWaitSignal
func goncclWaitSignal(peer C.int, h C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	return winIssue(h, nil, false, func(w *core.Window) (*core.Request, error) { return w.WaitSignal(int(peer)) })
}

//export goncclWaitSignalAsync
func goncclWaitSignalAsync(peer C.int, h C.goncclWindow_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return winIssue(h, out, true, func(w *core.Window) (*core.Request, error) { return w.WaitSignal(int(peer)) })
}
