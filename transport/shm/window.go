package shm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A window segment is one rank's memory of a one-sided window (see core/window.go),
// in a memfd that ranks on the same host map to write into directly:
//
//	0       magic u64, data size u64, ranks u64, token [16]byte
//	64      signal counter of rank 0 u32 (own cache line; a futex word)
//	128     signal counter of rank 1 ...
//	hdr     data, size bytes (hdr = the counters rounded up to a page)
//
// Counter r counts the signals rank r sent to the owner. Only senders add to it (a
// same-host sender directly, a remote one through the owner's message reader); the
// owner only reads it, so no signal is ever lost to a race.
const (
	winMagic      = 0x4e4957434e434f47 // "GONCCWIN"
	winOffSize    = 8
	winOffRanks   = 16
	winOffToken   = 24
	winOffSignals = 64
	pageSize      = 4096
)

// WindowToken proves that a mapped file is the window segment its owner announced.
type WindowToken [tokenSize]byte

// WindowSegment is one mapping of a rank's window memory.
type WindowSegment struct {
	mem    []byte // the whole mapping (outside the Go heap)
	hdr    int
	nranks int
}

func windowHeader(nranks int) int {
	n := winOffSignals + nranks*cacheLine
	return (n + pageSize - 1) / pageSize * pageSize
}

// CreateWindow makes a memfd holding a window of size data bytes with signal counters
// for nranks senders, maps it, and fills its data with init (nil: zeros; at most
// size bytes). The caller keeps fd open until every peer that maps it has done so.
func CreateWindow(nranks, size int, init []byte) (w *WindowSegment, fd int, token WindowToken, err error) {
	if nranks < 1 || size < 0 || len(init) > size {
		return nil, -1, token, fmt.Errorf("window of %d bytes for %d ranks (initial data %d bytes): invalid", size, nranks, len(init))
	}
	if _, err := rand.Read(token[:]); err != nil {
		return nil, -1, token, err
	}
	fd, err = unix.MemfdCreate("gonccl-window", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, token, fmt.Errorf("memfd_create: %w", err)
	}
	total := windowHeader(nranks) + size
	if err := unix.Ftruncate(fd, int64(total)); err != nil {
		unix.Close(fd)
		return nil, -1, token, fmt.Errorf("sizing the %d-byte window segment: %w", total, err)
	}
	mem, err := unix.Mmap(fd, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, -1, token, fmt.Errorf("mapping the %d-byte window segment (is /dev/shm or memory short?): %w", total, err)
	}
	w = &WindowSegment{mem: mem, hdr: windowHeader(nranks), nranks: nranks}
	copy(w.Data(), init)
	binary.LittleEndian.PutUint64(mem[winOffSize:], uint64(size))
	binary.LittleEndian.PutUint64(mem[winOffRanks:], uint64(nranks))
	copy(mem[winOffToken:], token[:])
	(*atomic.Uint64)(unsafe.Pointer(&mem[0])).Store(winMagic)
	return w, fd, token, nil
}

// OpenWindow maps the window segment that process pid holds open as fd (same host,
// same user, through /proc/pid/fd) and checks it is the one announced: its size,
// ranks and token.
func OpenWindow(pid, fd, nranks, size int, token WindowToken) (*WindowSegment, error) {
	mem, err := mapPeerFile(pid, fd, windowHeader(nranks)+size, nil)
	if err != nil {
		return nil, err
	}
	w := &WindowSegment{mem: mem, hdr: windowHeader(nranks), nranks: nranks}
	if (*atomic.Uint64)(unsafe.Pointer(&mem[0])).Load() != winMagic ||
		binary.LittleEndian.Uint64(mem[winOffSize:]) != uint64(size) ||
		binary.LittleEndian.Uint64(mem[winOffRanks:]) != uint64(nranks) ||
		WindowToken(mem[winOffToken:winOffToken+tokenSize]) != token {
		w.Unmap()
		return nil, fmt.Errorf("/proc/%d/fd/%d is not the peer's window (magic, size, ranks or token differ)", pid, fd)
	}
	return w, nil
}

// Data is the window's memory (size bytes).
func (w *WindowSegment) Data() []byte { return w.mem[w.hdr:len(w.mem):len(w.mem)] }

func (w *WindowSegment) counter(from int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&w.mem[winOffSignals+from*cacheLine]))
}

// Signal adds one to the counter of signals from rank from and wakes the owner if it
// waits. The atomic add orders every earlier write into Data before it.
func (w *WindowSegment) Signal(from int) {
	c := w.counter(from)
	c.Add(1)
	futexWakeAll(c)
}

// Signals is how many signals rank from has sent (modulo 2^32).
func (w *WindowSegment) Signals(from int) uint32 { return w.counter(from).Load() }

// SleepSignal sleeps while rank from's counter still reads seen, at most d; callers
// check the counter again (it returns early on a signal, a wake-up or an interrupt).
func (w *WindowSegment) SleepSignal(from int, seen uint32, d time.Duration) {
	futexSleep(w.counter(from), seen, d)
}

// Unmap releases this mapping; Data must not be used afterwards.
func (w *WindowSegment) Unmap() error { return unix.Munmap(w.mem) }
