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

// The segment, mapped by both ranks (side 0 created it, side 1 opened it):
//
//	0      magic u64, ring size u64, token [16]byte (proves the opener mapped the right file)
//	64     closed[0] u32: side 0 closed its end      (own cache line)
//	128    closed[1] u32: side 1 closed its end      (own cache line)
//	256    ring 0 control (side 0 -> side 1), 6 cache lines:
//	         head      u64  bytes ever written; written by the producer only
//	         tail      u64  bytes ever read; written by the consumer only
//	         dataEv    u32  bumped when data arrives for a consumer that is waiting (futex word)
//	         dataWait  u32  1 while the consumer may sleep on dataEv
//	         spaceEv   u32  bumped when space frees for a producer that is waiting (futex word)
//	         spaceWait u32  1 while the producer may sleep on spaceEv
//	640    ring 1 control (side 1 -> side 0)
//	4096   ring 0 data, ring size bytes; then ring 1 data
//
// Every counter sits on its own cache line so the producer's and consumer's writes do
// not bounce one line between cores.
const (
	cacheLine   = 64
	segMagic    = 0x4d48534c43434e47 // "GNCCLSHM"
	offMagic    = 0
	offRingSize = 8
	offToken    = 16
	offClosed   = 64 // + side*cacheLine
	offRings    = 256
	ringCtrl    = 6 * cacheLine
	ctrlSize    = 4096
	tokenSize   = 16
)

// segment is one mapping of the shared memory.
type segment struct {
	mem      []byte // the whole mapping (outside the Go heap)
	ringSize uint64
}

func segmentSize(ringSize uint64) int { return ctrlSize + 2*int(ringSize) }

// createSegment makes a memfd holding a fresh segment and maps it. The caller owns fd
// until the peer has opened it, then closes it: the mappings keep the memory alive,
// and the kernel frees it when the last one goes, however the ranks end.
func createSegment(ringSize uint64) (seg *segment, fd int, token [tokenSize]byte, err error) {
	if _, err := rand.Read(token[:]); err != nil {
		return nil, -1, token, err
	}
	fd, err = unix.MemfdCreate("gonccl-shm", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, token, fmt.Errorf("memfd_create: %w", err)
	}
	size := segmentSize(ringSize)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, -1, token, fmt.Errorf("sizing the %d-byte segment: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, -1, token, fmt.Errorf("mapping the %d-byte segment: %w", size, err)
	}
	binary.LittleEndian.PutUint64(mem[offRingSize:], ringSize)
	copy(mem[offToken:], token[:])
	(*atomic.Uint64)(unsafe.Pointer(&mem[offMagic])).Store(segMagic)
	return &segment{mem: mem, ringSize: ringSize}, fd, token, nil
}

// openSegment maps the segment that process pid holds open as fd, through
// /proc/pid/fd (same host, same user), and checks that it carries token.
func openSegment(pid, fd int, ringSize uint64, token [tokenSize]byte) (*segment, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(f)
	return mapSegment(f, path, ringSize, token)
}

// mapSegment maps the segment open as fd here (what names it in errors) and checks
// that it carries token.
func mapSegment(fd int, what string, ringSize uint64, token [tokenSize]byte) (*segment, error) {
	size := segmentSize(ringSize)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", what, err)
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("%s has %d bytes, expected %d: not the peer's", what, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", what, err)
	}
	s := &segment{mem: mem, ringSize: ringSize}
	if (*atomic.Uint64)(unsafe.Pointer(&mem[offMagic])).Load() != segMagic ||
		binary.LittleEndian.Uint64(mem[offRingSize:]) != ringSize ||
		[tokenSize]byte(mem[offToken:offToken+tokenSize]) != token {
		s.unmap()
		return nil, fmt.Errorf("%s is not the peer's segment (magic, size or token differ)", what)
	}
	return s, nil
}

func (s *segment) unmap() error { return unix.Munmap(s.mem) }

func (s *segment) u32(off int) *atomic.Uint32 { return (*atomic.Uint32)(unsafe.Pointer(&s.mem[off])) }
func (s *segment) u64(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off])) }

func (s *segment) closed(side int) *atomic.Uint32 { return s.u32(offClosed + side*cacheLine) }

// ring is a view of one direction's ring in a segment.
type ring struct {
	head, tail         *atomic.Uint64
	dataEv, dataWait   *atomic.Uint32
	spaceEv, spaceWait *atomic.Uint32
	data               []byte
	mask               uint64
}

func (s *segment) ring(i int) ring {
	c := offRings + i*ringCtrl
	d := ctrlSize + i*int(s.ringSize)
	return ring{
		head: s.u64(c), tail: s.u64(c + cacheLine),
		dataEv: s.u32(c + 2*cacheLine), dataWait: s.u32(c + 3*cacheLine),
		spaceEv: s.u32(c + 4*cacheLine), spaceWait: s.u32(c + 5*cacheLine),
		data: s.mem[d : d+int(s.ringSize) : d+int(s.ringSize)], mask: s.ringSize - 1,
	}
}

// Futex operations on a word in a MAP_SHARED mapping: the shared (non-private) forms,
// keyed by the file and offset, so they work across processes.
const (
	futexWait = 0 // FUTEX_WAIT
	futexWake = 1 // FUTEX_WAKE
)

// futexSleep sleeps while *w == val, at most d (d < 0: no limit). It returns on a
// wake-up, a change of *w, a signal or the timeout; callers re-check their condition.
func futexSleep(w *atomic.Uint32, val uint32, d time.Duration) {
	var tsp unsafe.Pointer
	var ts unix.Timespec
	if d >= 0 {
		ts = unix.NsecToTimespec(int64(d))
		tsp = unsafe.Pointer(&ts)
	}
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(val), uintptr(tsp), 0, 0)
}

// futexWakeAll wakes every thread sleeping on w.
func futexWakeAll(w *atomic.Uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}

// notify wakes the other side if it said it may sleep on ev (see Link.wait for why
// this cannot lose a wake-up).
func notify(ev, waiting *atomic.Uint32) {
	if waiting.Load() != 0 {
		ev.Add(1)
		futexWakeAll(ev)
	}
}

// kick wakes whoever sleeps on ev, unconditionally (close and peer death).
func kick(ev *atomic.Uint32) {
	ev.Add(1)
	futexWakeAll(ev)
}
