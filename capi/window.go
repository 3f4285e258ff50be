package main

// #include "handles.h"
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/gonccl/gonccl/core"
)

// One-sided windows (gonccl.h: goncclWin*, goncclPut, goncclSignal, goncclWaitSignal):
// handles over core.Window, which does the work.

type winEntry struct {
	win  *core.Window
	comm *commEntry
}

var windows = struct {
	sync.Mutex
	next  uint64
	m     map[uint64]*winEntry
	holds map[uint64]*core.WindowHold
}{m: map[uint64]*winEntry{}, holds: map[uint64]*core.WindowHold{}}

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
	var b []byte
	if init != nil {
		if b, err = hostBytes("init", init, uint64(count), d); err != nil {
			return fail(e.comm, err)
		}
	}
	if err := e.win.Register(b, int(count), d); err != nil {
		return fail(e.comm, err)
	}
	return C.goncclSuccess
}

//export goncclWinDeregister
func goncclWinDeregister(h C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupWindow(h)
	if err != nil {
		return fail(nil, err)
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
	err = e.win.Free()
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
	mem, wh, err := e.win.Memory(int(rank))
	if err != nil {
		return fail(e.comm, err)
	}
	*ptr, *bytes = nil, C.size_t(len(mem))
	if len(mem) > 0 {
		*ptr = unsafe.Pointer(unsafe.SliceData(mem))
	}
	if hold == nil {
		wh.Release() // the registration's own reference keeps it until deregistered
		return C.goncclSuccess
	}
	windows.Lock()
	windows.next++
	id := windows.next
	windows.holds[id] = wh
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
	wh.Release()
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
	out *C.goncclRequest_t, async bool) C.goncclResult_t {
	return winIssue(h, out, async, func(w *core.Window) (*core.Request, error) {
		d, err := dataType(dt)
		if err != nil {
			return nil, err
		}
		b, err := hostBytes("src", src, uint64(count), d)
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
	return put(src, count, dt, peer, off, h, nil, false)
}

//export goncclPutAsync
func goncclPutAsync(src unsafe.Pointer, count C.size_t, dt C.goncclDataType_t, peer C.int, off C.size_t, h C.goncclWindow_t,
	out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return put(src, count, dt, peer, off, h, out, true)
}

//export goncclSignal
func goncclSignal(peer C.int, h C.goncclWindow_t) (res C.goncclResult_t) {
	defer guard(&res)
	return winIssue(h, nil, false, func(w *core.Window) (*core.Request, error) { return w.Signal(int(peer)) })
}

//export goncclSignalAsync
func goncclSignalAsync(peer C.int, h C.goncclWindow_t, out *C.goncclRequest_t) (res C.goncclResult_t) {
	defer guard(&res)
	return winIssue(h, out, true, func(w *core.Window) (*core.Request, error) { return w.Signal(int(peer)) })
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
