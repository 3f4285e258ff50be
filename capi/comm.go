package main

// #include "handles.h"
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/devroute"
)

// commEntry is what a goncclComm_t refers to.
type commEntry struct {
	comm *core.Comm
	mu   sync.Mutex
	last string         // goncclGetLastError's message (handed out as a per-thread copy)
	dev  *devroute.Comm // the router's state: paths for device buffers, pinned staging
}

// The handle a C caller holds is a small C struct carrying an id into comms. A
// destroyed communicator's struct is kept with id 0, so a call on it is reported as
// invalid usage instead of touching freed memory.
var comms = struct {
	sync.Mutex
	next uint64
	m    map[uint64]*commEntry
}{m: map[uint64]*commEntry{}}

func lookupComm(h C.goncclComm_t) (*commEntry, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: communicator is NULL", core.ErrInvalidArgument)
	}
	id := uint64((*C.struct_goncclComm)(unsafe.Pointer(h)).id)
	comms.Lock()
	e := comms.m[id]
	comms.Unlock()
	if e == nil {
		return nil, fmt.Errorf("%w: communicator was destroyed or is not a gonccl communicator", errUsage)
	}
	return e, nil
}

// fail records err as the last error (of e, if given, and of the process) and returns
// its result code.
func fail(e *commEntry, err error) C.goncclResult_t {
	if e != nil {
		e.mu.Lock()
		e.last = err.Error()
		e.mu.Unlock()
	}
	recordGlobal(err)
	return resultOf(err)
}

//export goncclGetUniqueId
func goncclGetUniqueId(out *C.goncclUniqueId) (res C.goncclResult_t) {
	defer guard(&res)
	if out == nil {
		return fail(nil, fmt.Errorf("%w: goncclGetUniqueId: uniqueId is NULL", core.ErrInvalidArgument))
	}
	id, err := core.NewUniqueID()
	if err != nil {
		return fail(nil, err)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(&out.internal[0])), core.UniqueIDSize)
	copy(dst, id[:])
	return C.goncclSuccess
}

//export goncclCommInitRank
func goncclCommInitRank(out *C.goncclComm_t, nranks C.int, id C.goncclUniqueId, rank C.int) C.goncclResult_t {
	return goncclCommInitRankTimeout(out, nranks, id, rank, 0)
}

//export goncclCommInitRankTimeout
func goncclCommInitRankTimeout(out *C.goncclComm_t, nranks C.int, cid C.goncclUniqueId, rank C.int, timeoutMs C.int64_t) (res C.goncclResult_t) {
	defer guard(&res)
	return initRank("goncclCommInitRankTimeout", out, nranks, cid, rank, timeoutOptions(timeoutMs))
}

// timeoutOptions are the options of a communicator with timeoutMs (0 or less: the default).
func timeoutOptions(timeoutMs C.int64_t) core.Options {
	opts := core.Options{}
	if timeoutMs > 0 {
		opts.Timeout = msDuration(int64(timeoutMs))
	}
	return opts
}

//export goncclCommInitRankConfig
func goncclCommInitRankConfig(out *C.goncclComm_t, nranks C.int, cid C.goncclUniqueId, rank C.int, cfg *C.goncclConfig_t) (res C.goncclResult_t) {
	defer guard(&res)
	opts := core.Options{}
	if cfg != nil {
		if uintptr(cfg.size) != unsafe.Sizeof(C.goncclConfig_t{}) {
			return fail(nil, fmt.Errorf("%w: goncclCommInitRankConfig: config.size is %d, expected sizeof(goncclConfig_t) = %d",
				core.ErrInvalidArgument, uint64(cfg.size), unsafe.Sizeof(C.goncclConfig_t{})))
		}
		if cfg.timeoutMs > 0 {
			opts.Timeout = msDuration(int64(cfg.timeoutMs))
		}
		if cfg.algo != nil {
			opts.Algo = C.GoString(cfg.algo)
		}
		if cfg.chunkBytes < 0 || cfg.chunkBytes > 1<<30 {
			return fail(nil, fmt.Errorf("%w: goncclCommInitRankConfig: chunkBytes %d is out of range (0, or 4096..1 GiB)",
				core.ErrInvalidArgument, int64(cfg.chunkBytes)))
		}
		opts.ChunkBytes = int(cfg.chunkBytes)
		opts.Epoch = uint32(cfg.epoch)
	}
	return initRank("goncclCommInitRankConfig", out, nranks, cid, rank, opts)
}

// initRank joins a communicator with opts and returns its handle in out; fn names the
// caller in errors.
func initRank(fn string, out *C.goncclComm_t, nranks C.int, cid C.goncclUniqueId, rank C.int, opts core.Options) C.goncclResult_t {
	if out == nil {
		return fail(nil, fmt.Errorf("%w: %s: comm is NULL", core.ErrInvalidArgument, fn))
	}
	*out = nil
	var id core.UniqueID
	copy(id[:], unsafe.Slice((*byte)(unsafe.Pointer(&cid.internal[0])), core.UniqueIDSize))
	c, err := core.NewComm(id, int(nranks), int(rank), opts)
	if err != nil {
		return fail(nil, err)
	}
	*out = register(c)
	return C.goncclSuccess
}

// register enters c in the table and returns the handle a C caller holds.
func register(c *core.Comm) C.goncclComm_t {
	comms.Lock()
	comms.next++
	idn := comms.next
	e := &commEntry{comm: c, dev: devroute.NewComm(c)}
	comms.m[idn] = e
	comms.Unlock()
	h := (*C.struct_goncclComm)(C.malloc(C.size_t(unsafe.Sizeof(C.struct_goncclComm{}))))
	h.id = C.ulonglong(idn)
	return C.goncclComm_t(unsafe.Pointer(h))
}

// release removes the communicator from the table.
func release(h C.goncclComm_t, e *commEntry) {
	hs := (*C.struct_goncclComm)(unsafe.Pointer(h))
	comms.Lock()
	delete(comms.m, uint64(hs.id))
	hs.id = 0
	comms.Unlock()
}

//export goncclCommDestroy
func goncclCommDestroy(h C.goncclComm_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	derr := e.dev.Destroy(false) // collective, so before the communicator goes
	err = errors.Join(derr, e.comm.Destroy(), e.dev.ClosePool())
	release(h, e)
	if err != nil {
		return fail(nil, err)
	}
	return C.goncclSuccess
}

//export goncclCommAbort
func goncclCommAbort(h C.goncclComm_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	err = errors.Join(e.dev.Destroy(true), e.comm.Abort(), e.dev.ClosePool())
	release(h, e)
	if err != nil {
		return fail(nil, err)
	}
	return C.goncclSuccess
}

// goncclCommGetAsyncError sets *asyncError to the error that broke comm (its result
// code; goncclGetLastError(comm) then has its message), or goncclSuccess: what an
// operation enqueued on a stream met after its call returned, e.g. a peer lost, a
// timeout or a mismatch on the device path (GONCCL_DEVICE_PATH).
//
//export goncclCommGetAsyncError
func goncclCommGetAsyncError(h C.goncclComm_t, asyncError *C.goncclResult_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if asyncError == nil {
		return fail(e, fmt.Errorf("%w: goncclCommGetAsyncError: asyncError is NULL", core.ErrInvalidArgument))
	}
	*asyncError = C.goncclSuccess
	if err := e.comm.Err(); err != nil {
		*asyncError = fail(e, err)
	}
	return C.goncclSuccess
}

//export goncclCommSetTimeout
func goncclCommSetTimeout(h C.goncclComm_t, timeoutMs C.int64_t) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if err := e.comm.SetTimeout(msDuration(int64(timeoutMs))); err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}

//export goncclCommCount
func goncclCommCount(h C.goncclComm_t, count *C.int) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if count == nil {
		return fail(e, fmt.Errorf("%w: goncclCommCount: count is NULL", core.ErrInvalidArgument))
	}
	*count = C.int(e.comm.Size())
	return C.goncclSuccess
}

//export goncclCommUserRank
func goncclCommUserRank(h C.goncclComm_t, rank *C.int) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if rank == nil {
		return fail(e, fmt.Errorf("%w: goncclCommUserRank: rank is NULL", core.ErrInvalidArgument))
	}
	*rank = C.int(e.comm.Rank())
	return C.goncclSuccess
}

// goncclGetLastError hands out a copy of the message in a buffer of the calling
// thread's own (capi/lasterror.c), so that no other thread's failure can free or
// change it while the caller reads it: it lives until this thread's next call.
//
//export goncclGetLastError
func goncclGetLastError(h C.goncclComm_t) *C.char {
	var msg string
	if e, err := lookupComm(h); h != nil && err == nil {
		e.mu.Lock()
		msg = e.last
		e.mu.Unlock()
	} else {
		lastError.Lock()
		msg = lastError.msg
		lastError.Unlock()
	}
	// The C side copies the bytes before returning; it keeps no Go pointer.
	return C.goncclThreadErrorCopy((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

//export goncclCommDumpTrace
func goncclCommDumpTrace(h C.goncclComm_t, path *C.char) (res C.goncclResult_t) {
	defer guard(&res)
	e, err := lookupComm(h)
	if err != nil {
		return fail(nil, err)
	}
	if path == nil {
		return fail(e, fmt.Errorf("%w: goncclCommDumpTrace: path is NULL", core.ErrInvalidArgument))
	}
	if err := e.comm.DumpTrace(C.GoString(path)); err != nil {
		return fail(e, err)
	}
	return C.goncclSuccess
}
