package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// DevWindow is the device side of a one-sided window over CUDA memory, for ranks on
// one host (core.Window keeps the signal counters, in shared memory):
//
//	register  each rank exports the allocation holding its window (cuIpcGetMemHandle
//	          on the allocation's start, as the same-GPU path does) and every peer maps
//	          it once (cuIpcOpenMemHandle); ranks of one process use each other's
//	          pointers as they are
//	put       a device copy (cuMemcpyDtoDAsync) into the peer's mapping, queued on the
//	          caller's stream, then an event recorded behind it
//	signal    waits on the host until the events of the puts to that peer before it
//	          have completed, then bumps the peer's counter (the caller's bump): no
//	          stream ever waits on the GPU for another process, so nothing can hold a
//	          hardware queue another context needs (CUDA_DEVICE_MAX_CONNECTIONS=1
//	          included)
//	close     waits for this rank's puts to finish, then closes its mappings; the
//	          caller then holds a barrier, after which no rank maps any window and
//	          each exporter may free its memory
//
// Signals to one peer bump its counter in the order they were issued, each only once
// every put before it has landed, so a peer that saw n signals sees the data of the
// puts before the n-th.
type DevWindow struct {
	d       *Driver
	g       *sgDriver
	ctx     Context
	dev     int
	rank    int
	timeout time.Duration
	ptrs    []uintptr // every rank's window as this process addresses it
	bytes   []int
	here    []uintptr // the base of each mapping this rank opened (and closes); 0: none
	pids    []int
	checked []time.Time // when each peer's process was last seen alive (w.mu)

	mu      sync.Mutex
	pending [][]event  // per peer: events behind the puts no signal has covered yet
	last    []*sigLink // per peer: the last signal issued
	pool    []event    // events whose work has completed, for the next puts
	stale   []event    // events of failed signals, destroyed at Close once done
	links   sync.WaitGroup
	closed  bool
}

// sigLink is one signal in a peer's chain: the next one waits for it.
type sigLink struct {
	done chan struct{}
	err  error
}

// ErrWindowTimeout means a window operation waited on the host past its timeout for
// device work (the puts before a signal, or the puts before closing).
var ErrWindowTimeout = errors.New("cuda: timed out waiting for a window's device copies")

// ErrWindowRefused means the ranks cannot share their windows' device memory (every
// rank gets it, naming a rank and why).
var ErrWindowRefused = errors.New("cuda: the ranks cannot map each other's window memory")

const winRecordBytes = 1 + 8 + 8 + busIDBytes + 8 + 8 + 8 + ipcHandleSize + 160

// winRecord is what each rank tells the others about its window memory.
type winRecord struct {
	ok     bool
	pid    int
	proc   uint64
	bus    string
	raw    uint64 // the window's address in its own process
	off    int    // its offset in the exported allocation
	bytes  int
	handle [ipcHandleSize]byte
	reason string
}

func (r winRecord) encode() []byte {
	b := make([]byte, winRecordBytes)
	if r.ok {
		b[0] = 1
	}
	binary.LittleEndian.PutUint64(b[1:], uint64(r.pid))
	binary.LittleEndian.PutUint64(b[9:], r.proc)
	o := 17
	copy(b[o:o+busIDBytes], r.bus)
	o += busIDBytes
	binary.LittleEndian.PutUint64(b[o:], r.raw)
	binary.LittleEndian.PutUint64(b[o+8:], uint64(r.off))
	binary.LittleEndian.PutUint64(b[o+16:], uint64(r.bytes))
	o += 24
	copy(b[o:], r.handle[:])
	o += ipcHandleSize
	copy(b[o:len(b)-1], r.reason)
	return b
}

func decodeWinRecord(b []byte) winRecord {
	r := winRecord{ok: b[0] == 1, pid: int(binary.LittleEndian.Uint64(b[1:])), proc: binary.LittleEndian.Uint64(b[9:])}
	o := 17
	r.bus = nulTerminated(b[o : o+busIDBytes])
	o += busIDBytes
	r.raw = binary.LittleEndian.Uint64(b[o:])
	r.off = int(binary.LittleEndian.Uint64(b[o+8:]))
	r.bytes = int(binary.LittleEndian.Uint64(b[o+16:]))
	o += 24
	copy(r.handle[:], b[o:])
	o += ipcHandleSize
	r.reason = nulTerminated(b[o:])
	return r
}

// NewDevWindow sets up rank's side of a window whose memory is the bytes bytes of
// device memory at ptr, on device dev (see DevicePointer), among nranks ranks of one
// host. The window holds dev's primary context until Close.
// exchange must all-gather a record of each rank over the communicator (it runs twice).
// problem, if not nil, says why this rank cannot take part (every rank then gets an
// error naming it). Every rank gets the same answer: a window, or an error.
func NewDevWindow(d *Driver, dev, rank, nranks int, ptr uintptr, bytes int, timeout time.Duration,
	problem error, exchange func([]byte) ([]byte, error)) (*DevWindow, error) {
	w := &DevWindow{d: d, dev: dev, rank: rank, timeout: timeout, ptrs: make([]uintptr, nranks), here: make([]uintptr, nranks),
		bytes: make([]int, nranks), pids: make([]int, nranks), checked: make([]time.Time, nranks), pending: make([][]event, nranks), last: make([]*sigLink, nranks)}
	me := winRecord{pid: os.Getpid(), proc: processID, raw: uint64(ptr), bytes: bytes}
	err := problem
	if err == nil {
		if w.ctx, err = d.RetainPrimary(dev); err != nil {
			w.ctx = 0
		}
	}
	if err == nil {
		err = w.export(ptr, bytes, &me)
	}
	if err != nil {
		me.reason = err.Error()
	} else {
		me.ok = true
	}
	recs, err := w.gather(exchange, me.encode(), nranks)
	if err == nil {
		for r, rec := range recs {
			if !rec.ok {
				err = fmt.Errorf("%w: rank %d: %s", ErrWindowRefused, r, rec.reason)
				break
			}
		}
	}
	if err != nil {
		w.release()
		return nil, err
	}
	// Every rank exported; now each maps the others, and they agree on the outcome.
	openErr := w.open(recs)
	verdict := winRecord{ok: openErr == nil}
	if openErr != nil {
		verdict.reason = openErr.Error()
	}
	verdicts, err := w.gather(exchange, verdict.encode(), nranks)
	if err == nil {
		for r, v := range verdicts {
			if !v.ok {
				err = fmt.Errorf("%w: rank %d: %s", ErrWindowRefused, r, v.reason)
				break
			}
		}
	}
	if err != nil {
		w.closeMappings()
		w.release()
		return nil, err
	}
	return w, nil
}

// release lets go of the primary context.
func (w *DevWindow) release() error {
	if w.ctx == 0 {
		return nil
	}
	w.ctx = 0
	return w.d.ReleasePrimary(w.dev)
}

func (w *DevWindow) gather(exchange func([]byte) ([]byte, error), rec []byte, nranks int) ([]winRecord, error) {
	all, err := exchange(rec)
	if err != nil {
		return nil, fmt.Errorf("cuda: window setup exchange: %w", err)
	}
	if len(all) != nranks*winRecordBytes {
		return nil, fmt.Errorf("cuda: window setup exchange returned %d bytes, want %d", len(all), nranks*winRecordBytes)
	}
	recs := make([]winRecord, nranks)
	for r := range recs {
		recs[r] = decodeWinRecord(all[r*winRecordBytes : (r+1)*winRecordBytes])
	}
	return recs, nil
}

// export describes this rank's window memory: its device's bus id and a handle to
// the allocation holding it.
func (w *DevWindow) export(ptr uintptr, bytes int, me *winRecord) error {
	g, err := openSameGPUDriver(w.d)
	if err != nil {
		return err
	}
	w.g = g
	return w.d.Do(w.ctx, func() error {
		var err error
		if me.bus, err = w.d.BusID(w.dev); err != nil {
			return err
		}
		if bytes == 0 {
			return nil // nothing to map: puts into it are refused by their bounds
		}
		_, base, size, err := g.Allocation(ptr)
		if err != nil {
			return fmt.Errorf("the window's memory at %#x is not device memory CUDA knows: %w", ptr, err)
		}
		if ptr+uintptr(bytes) > base+uintptr(size) {
			return fmt.Errorf("the window's %d bytes at %#x run past the end of the allocation holding them (%d bytes at %#x)", bytes, ptr, size, base)
		}
		me.off = int(ptr - base)
		if pool, err := g.FromPool(base); err == nil && pool {
			// Short: the reason travels in a record of 160 bytes.
			return errors.New("CUDA IPC cannot export stream-ordered pool memory (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync); use the native allocator")
		}
		if me.handle, err = w.d.IpcGetMemHandle(base); err != nil {
			// Short: the reason travels in a record of 160 bytes.
			return fmt.Errorf("CUDA IPC cannot export the window's allocation (cuMemCreate memory, e.g. PyTorch's expandable segments; use cudaMalloc): %w", err)
		}
		return nil
	})
}

// open maps every peer's window memory; a peer on another GPU must be one this GPU
// can access.
func (w *DevWindow) open(recs []winRecord) error {
	me := recs[w.rank]
	return w.d.Do(w.ctx, func() error {
		for r, rec := range recs {
			w.bytes[r], w.pids[r] = rec.bytes, rec.pid
			switch {
			case rec.bytes == 0:
				continue
			case r == w.rank || rec.proc == processID:
				w.ptrs[r] = uintptr(rec.raw) // CUDA opens no handle in the process that exported it
				continue
			}
			if rec.bus != me.bus {
				peerDev, seen := w.d.DeviceByBusID(rec.bus)
				if !seen {
					return fmt.Errorf("rank %d's GPU %s is not visible to rank %d (CUDA_VISIBLE_DEVICES?), so its window cannot be mapped", r, rec.bus, w.rank)
				}
				can, err := w.d.CanAccessPeer(w.dev, peerDev)
				if err != nil {
					return err
				}
				if !can {
					return fmt.Errorf("rank %d's GPU %s cannot access rank %d's GPU %s (no peer access between them), so their windows cannot be mapped", w.rank, me.bus, r, rec.bus)
				}
			}
			base, err := w.d.IpcOpenMemHandle(rec.handle)
			if err != nil {
				return fmt.Errorf("mapping rank %d's window memory: %w", r, err)
			}
			w.ptrs[r], w.here[r] = base+uintptr(rec.off), base
		}
		return nil
	})
}

// Ptr is rank's window memory as this process addresses it (0 if it has no bytes).
func (w *DevWindow) Ptr(rank int) uintptr { return w.ptrs[rank] }

// Put queues on stream s (of the window's context) a copy of n bytes from device
// memory src into peer's window at byte off, and an event behind it for the next
// signal to peer. The caller checked the bounds.
func (w *DevWindow) Put(s Stream, src uintptr, n, peer, off int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("%w: put to rank %d: the window's device memory was released", ErrWindowRefused, peer)
	}
	if n == 0 {
		return nil
	}
	if peer != w.rank && w.pids[peer] != os.Getpid() && !w.alive(peer) {
		return fmt.Errorf("cuda: put to rank %d: its process (pid %d) is gone, and its window memory with it", peer, w.pids[peer])
	}
	if fault("window-put-offset") { // tests: one element off, inside the window
		if off+n+4 <= w.bytes[peer] {
			off += 4
		} else if off >= 4 {
			off -= 4
		}
	}
	return w.d.Do(w.ctx, func() error {
		if err := w.d.MemcpyDtoD(w.ptrs[peer]+uintptr(off), src, n, s); err != nil {
			return fmt.Errorf("put to rank %d: %w", peer, err)
		}
		var e event
		if k := len(w.pool); k > 0 {
			e, w.pool = w.pool[k-1], w.pool[:k-1]
		} else {
			var err error
			if e, err = w.d.EventCreate(); err != nil {
				return fmt.Errorf("put to rank %d: %w", peer, err)
			}
		}
		if err := w.d.EventRecord(e, s); err != nil {
			w.pool = append(w.pool, e)
			return fmt.Errorf("put to rank %d: %w", peer, err)
		}
		w.pending[peer] = append(w.pending[peer], e)
		return nil
	})
}

// alive reports whether peer's process still runs (not gone, not a zombie: its
// device memory dies with it, and a copy into it would fault). Checked at most every
// 10 ms per peer; w.mu held.
func (w *DevWindow) alive(peer int) bool {
	now := time.Now()
	if now.Sub(w.checked[peer]) < 10*time.Millisecond {
		return true
	}
	w.checked[peer] = now
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", w.pids[peer]))
	if err != nil {
		return unix.Kill(w.pids[peer], 0) != unix.ESRCH
	}
	return !exiting(b)
}

// pfExiting is the kernel's PF_EXITING task flag: set when a process starts to exit,
// before it closes its files, so a peer that read the end of its connection already
// sees it (the zombie state comes later: a put checked in between was let through).
const pfExiting = 0x4

// exiting reports whether a /proc/PID/stat line is a process that has begun to exit or
// is gone (a zombie); an unreadable line counts as running.
func exiting(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	if stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return true
	}
	f := strings.Fields(string(stat[i+2:])) // state ppid pgrp session tty_nr tpgid flags ...
	if len(f) < 7 {
		return false
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// Signal takes the next place in peer's order of signals and returns the function
// that sends it: run waits on the host (at most until deadline) until every put to
// peer issued before Signal, and every earlier signal to peer, has completed, then
// bumps peer's counter (bump). Run it once, on any goroutine (its own, for an
// asynchronous signal).
func (w *DevWindow) Signal(peer int, deadline time.Time, bump func() error) (run func() error, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, fmt.Errorf("%w: signal to rank %d: the window's device memory was released", ErrWindowRefused, peer)
	}
	evs, prev := w.pending[peer], w.last[peer]
	w.pending[peer] = nil
	link := &sigLink{done: make(chan struct{})}
	w.last[peer] = link
	w.links.Add(1)
	return func() error {
		defer w.links.Done()
		link.err = w.signal(peer, deadline, prev, evs, bump)
		close(link.done)
		return link.err
	}, nil
}

func (w *DevWindow) signal(peer int, deadline time.Time, prev *sigLink, evs []event, bump func() error) error {
	if prev != nil {
		timer := time.NewTimer(time.Until(deadline))
		defer timer.Stop()
		select {
		case <-prev.done:
			if prev.err != nil {
				w.retire(evs, false)
				return fmt.Errorf("signal to rank %d: an earlier signal to it failed: %w", peer, prev.err)
			}
		case <-timer.C:
			w.retire(evs, false)
			return fmt.Errorf("%w: signal to rank %d: an earlier signal to it has not gone out after %v", ErrWindowTimeout, peer, w.timeout)
		}
	}
	if fault("window-signal-early") { // tests: bump without waiting for the puts
		w.retire(evs, false)
		return bump()
	}
	if err := w.waitEvents(evs, deadline); err != nil {
		w.retire(evs, false)
		return fmt.Errorf("signal to rank %d: %w", peer, err)
	}
	w.retire(evs, true)
	return bump()
}

// waitEvents polls evs on the host until all have completed, or deadline.
func (w *DevWindow) waitEvents(evs []event, deadline time.Time) error {
	sleep := 2 * time.Microsecond
	for len(evs) > 0 {
		var done bool
		err := w.d.Do(w.ctx, func() error {
			for len(evs) > 0 {
				ok, err := w.d.EventDone(evs[0])
				if err != nil || !ok {
					return err
				}
				evs = evs[1:]
			}
			done = true
			return nil
		})
		if err != nil || done {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d of its puts have not finished after %v (is their stream held up behind other work?)", ErrWindowTimeout, len(evs), w.timeout)
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, 500*time.Microsecond)
	}
	return nil
}

// retire takes back the events of a signal: into the pool if they completed, else
// until Close.
func (w *DevWindow) retire(evs []event, completed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if completed {
		w.pool = append(w.pool, evs...)
	} else {
		w.stale = append(w.stale, evs...)
	}
}

// Close waits (at most the timeout) for this rank's signals and puts to finish, then
// closes its mappings of the peers' windows and destroys its events. The caller then
// holds a barrier: after it, no rank maps this rank's memory, which it may free. If
// the puts do not finish, the mappings stay open (closing memory a copy still writes
// is undefined) and the error says so.
func (w *DevWindow) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	w.links.Wait() // each signal ends by its deadline
	w.mu.Lock()
	evs := append([]event(nil), w.stale...)
	for _, p := range w.pending {
		evs = append(evs, p...)
	}
	w.pending, w.stale = make([][]event, len(w.pending)), nil
	pool := w.pool
	w.pool = nil
	w.mu.Unlock()
	if err := w.waitEvents(append([]event(nil), evs...), time.Now().Add(w.timeout)); err != nil {
		return fmt.Errorf("closing the window: %w; its mappings of the peers' memory stay open", err)
	}
	first := w.closeMappings()
	if err := w.d.Do(w.ctx, func() error {
		for _, e := range append(pool, evs...) {
			if err := w.d.EventDestroy(e); err != nil {
				return err
			}
		}
		return nil
	}); err != nil && first == nil {
		first = err
	}
	if err := w.release(); err != nil && first == nil {
		first = err
	}
	return first
}

// closeMappings closes the peers' memory this rank mapped.
func (w *DevWindow) closeMappings() error {
	if w.ctx == 0 {
		return nil
	}
	var first error
	err := w.d.Do(w.ctx, func() error {
		for r, base := range w.here {
			if base == 0 {
				continue
			}
			if err := w.d.IpcCloseMemHandle(base); err != nil && first == nil {
				first = fmt.Errorf("unmapping rank %d's window memory: %w", r, err)
			}
			w.here[r], w.ptrs[r] = 0, 0
		}
		return nil
	})
	if first == nil {
		first = err
	}
	return first
}
