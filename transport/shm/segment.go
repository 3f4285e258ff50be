package shm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
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
//	192    process[0] u64, process[1] u64: each side's process nonce (see procNonce),
//	       written once at setup, before the side answers or is answered
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
	offClosed   = 64  // + side*cacheLine
	offProcess  = 192 // + side*8
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
	binary.LittleEndian.PutUint64(mem[offProcess:], procNonce)
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
	binary.LittleEndian.PutUint64(mem[offProcess+8:], procNonce)
	return s, nil
}

// procNonce names this process among those that share segments: a pid would not do,
// since ranks in different pid namespaces can have the same one.
var procNonce = func() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("shm: no randomness for the process nonce: %v", err))
	}
	return binary.LittleEndian.Uint64(b[:]) | 1 // never 0: 0 is a side that has not written
}()

// samePeerProcess reports whether the other side of the segment (whose setup has
// finished) is this process.
func (s *segment) samePeerProcess(side int) bool {
	return binary.LittleEndian.Uint64(s.mem[offProcess+8*(1-side):]) == procNonce
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
//
// It tells the Go runtime it is in a system call, so that the runtime's monitor
// (sysmon) hands this goroutine's processor (P) to other goroutines while it sleeps:
// the right wait where the one that wakes it is a goroutine of this process, which may
// need that very P to run.
func futexSleep(w *atomic.Uint32, val uint32, d time.Duration) {
	var tsp unsafe.Pointer
	var ts unix.Timespec
	if d >= 0 {
		ts = unix.NsecToTimespec(int64(d))
		tsp = unsafe.Pointer(&ts)
	}
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(val), uintptr(tsp), 0, 0)
}

// futexSleepRaw is futexSleep without telling the runtime: the goroutine keeps its P
// while it sleeps, and d must be short (at most maxSleep).
//
// Where the peer is another process, handing the P around is pure cost: sysmon wakes
// to retake the P from a thread that has slept past 20us, hands it off (waking another
// thread, which finds nothing to do and sleeps again), and the sleeper, woken, must win
// a P back before it can run. With hundreds of ranks on a few cores that is most of
// the CPU a collective gets (256 ranks on 2 cores: under a tenth of the time went to
// copying and reducing). Sleeping raw keeps the sleeper's P and thread as they are.
//
// What a thread blocked in a raw system call holding its P costs the rest of its
// process, and why d is short:
//   - The other goroutines cannot use that P. rawSleepers keeps at least one P free
//     of raw sleepers (see rawSleepBegin), so the process's other goroutines (the
//     other half of a sendrecv, heartbeats, the liveness watcher, timers) still run.
//   - A stop-the-world (GC's start and end, a stack dump) waits for every P: it waits
//     for this one until the sleep ends, at most d. Signals do not shorten the sleep
//     (Go installs its handlers with SA_RESTART, and the kernel restarts a timed
//     FUTEX_WAIT), so d is the bound of that pause: maxSleep, 10 ms, one GC pause in
//     a process that rarely collects.
//   - Preemption: sysmon asks a goroutine that has held its P for 10 ms to yield with
//     a signal (SIGURG), which ends a timed FUTEX_WAIT with EINTR (the kernel restarts
//     only an untimed one); the caller, back in Go, yields at its next function call.
//     So a raw sleeper gives its P up every 10-20 ms even without the bound; the bound
//     is what holds where that signal does not come (a runtime that stops sending it,
//     a stop-the-world that already began). The caller yields after every raw sleep
//     that timed out, too.
//
// It reports whether the sleep lasted the whole of d.
func futexSleepRaw(w *atomic.Uint32, val uint32, d time.Duration) (timedOut bool) {
	ts := unix.NsecToTimespec(int64(d))
	_, _, errno := unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(w)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
	if errno == 0 {
		rawWakes.Add(1)
	}
	return errno == unix.ETIMEDOUT
}

var (
	rawSleepers atomic.Int32 // goroutines of this process in futexSleepRaw
	rawWakes    atomic.Int64 // raw sleeps ended by a FUTEX_WAKE (for tests)
	crowded     atomic.Bool  // see SetCrowded
)

// SetCrowded says whether the ranks of this host outnumber its cores (the engine knows
// once its communicator has met its peers). Only then do waits on a peer in another
// process sleep raw: with a core to spare for every rank, handing the P around costs
// little, and keeping it cost 2 ranks on 2 cores 10-35% more per small all_reduce
// (python -m gonccl.bench all_reduce -np 2, 512 B-32 KiB, three alternating rounds).
// A process whose communicators differ takes the last word.
func SetCrowded(on bool) { crowded.Store(on) }

// rawSleepBegin reports whether the caller may sleep raw, and if so counts it in until
// rawSleepEnd: only where the host is crowded (SetCrowded), and only while the raw sleepers, this one included, leave at least one P of
// GOMAXPROCS free for the process's other goroutines. A caller that may not sleeps the
// ordinary way (futexSleep).
func rawSleepBegin() bool {
	if !crowded.Load() {
		return false
	}
	limit := int32(runtime.GOMAXPROCS(0)) - 1
	for {
		n := rawSleepers.Load()
		if n >= limit {
			return false
		}
		if rawSleepers.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

func rawSleepEnd() { rawSleepers.Add(-1) }

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
