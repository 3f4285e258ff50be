package samegpu

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/cuda/driver"
)

// seqPage is a rank's page of host shared memory on the same-GPU path (a memfd the
// peers map through /proc/<pid>/fd): the sequence numbers that order the ranks on the
// host, the description of the rank's buffers for the current operation, and the
// words streams wait on (overlap.go). The owner's host writes the sequence numbers and
// the descriptor (written before the sequence number that publishes it); streams write
// the stream words with stream memory operations, one set per operation slot: the
// owner's its own progress (seqDoneAt), the launcher's a follower's seqGo, and each
// follower its arrival word in the launcher's page (seqArrive). A stream waits only on words of its own rank's page,
// so that its host can release it (overlap.go). The page is registered with the GPU
// (cuMemHostRegister) in its owner's process, the launcher's page in every follower's,
// and every follower's in the launcher's.
type seqPage struct {
	mem []byte
	dev uintptr // its device address where registered here, else 0
}

// The page's layout.
const (
	seqReady  = 0  // uint64: the last operation whose input is ready (its event recorded)
	seqDone   = 8  // uint64 (launcher): the last operation whose kernels are enqueued and event recorded
	seqStatus = 16 // uint64 (launcher): 0, or why the last operation failed (statusMismatch)
	seqDesc   = 24 // the operation (sameOp): kind, dtype, reduction, root (4 bytes each), count (8)
	seqIn     = 48 // the input buffer (bufDesc)
	seqOut    = 48 + bufDescBytes
	seqDoneAt = 256                    // uint32 per slot, written by the owner's stream: operation n once it has run all of its part of n (slot n % seqSlots)
	seqGo     = seqDoneAt + 4*seqSlots // uint32 per slot (a follower's page), written by the launcher's stream: operation n once its kernels have run
	seqArrive = seqGo + 4*seqSlots     // uint32 per rank and slot (the launcher's page), rank r's slot i at seqArrive+4(r*seqSlots+i), written by rank r's stream: operation n once its input is in place
	seqBytes  = 64 << 10
)

// seqSlots is how many operations of a rank may be on the GPU at once: each has its
// own stream words (slot n % seqSlots), since a rank may run operations on several
// streams, whose words would otherwise overtake each other. A rank reuses a slot only
// once its own stream has run its part of the operation before in that slot.
const seqSlots = 32

// maxRanks is how many ranks one page has arrival words for.
const maxRanks = (seqBytes - seqArrive) / (4 * seqSlots)

func slot(n uint64) int { return int(n % seqSlots) }

// goAt, doneAt and arriveAt are the offsets of operation n's words.
func goAt(n uint64) int            { return seqGo + 4*slot(n) }
func doneAt(n uint64) int          { return seqDoneAt + 4*slot(n) }
func arriveAt(r int, n uint64) int { return seqArrive + 4*(r*seqSlots+slot(n)) }

// statusMismatch: the ranks called different operations.
const statusMismatch = 1

// bufDesc is where a rank's buffer lives, for the launcher: the buffer as it is (a rank
// of the launcher's process: id 0, its address and size), or the rank's exchange buffer
// (xbufID | its count, address and size in the owner's process, its file-descriptor
// handle), and the offset in it.
type bufDesc struct {
	id     uint64
	base   uintptr
	size   int
	off    int
	handle [driver.IPCHandleSize]byte
}

const bufDescBytes = 8 + 8 + 8 + 8 + driver.IPCHandleSize

func (b bufDesc) put(p []byte) {
	binary.LittleEndian.PutUint64(p[0:], b.id)
	binary.LittleEndian.PutUint64(p[8:], uint64(b.base))
	binary.LittleEndian.PutUint64(p[16:], uint64(b.size))
	binary.LittleEndian.PutUint64(p[24:], uint64(b.off))
	copy(p[32:], b.handle[:])
}

func getBufDesc(p []byte) bufDesc {
	b := bufDesc{id: binary.LittleEndian.Uint64(p[0:]), base: uintptr(binary.LittleEndian.Uint64(p[8:])),
		size: int(binary.LittleEndian.Uint64(p[16:])), off: int(binary.LittleEndian.Uint64(p[24:]))}
	copy(b.handle[:], p[32:])
	return b
}

// newSeqPage makes this rank's page: it returns the page and the fd the peers open.
func newSeqPage() (*seqPage, int, error) {
	fd, err := unix.MemfdCreate("gonccl-samegpu", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, -1, fmt.Errorf("cuda: same-GPU sequence page: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, seqBytes); err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("cuda: same-GPU sequence page: ftruncate: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, seqBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, -1, fmt.Errorf("cuda: same-GPU sequence page: mmap: %w", err)
	}
	return &seqPage{mem: mem}, fd, nil
}

// openSeqPage maps a peer's page.
func openSeqPage(pid, fd int) (*seqPage, error) {
	f, err := unix.Open(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cuda: opening the same-GPU sequence page of process %d: %w", pid, err)
	}
	defer unix.Close(f)
	mem, err := unix.Mmap(f, 0, seqBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("cuda: mapping the same-GPU sequence page of process %d: %w", pid, err)
	}
	return &seqPage{mem: mem}, nil
}

func (p *seqPage) word(off int) *atomic.Uint64 { return (*atomic.Uint64)(unsafe.Pointer(&p.mem[off])) }

// done says whether the owner's stream has run its part of operation n, enqueued
// operations up to last: its slot's word has reached n, or the slot has been reused
// since (n + seqSlots <= last), which the owner did only once n was done.
func (p *seqPage) done(n, last uint64) bool {
	return n == 0 || n+seqSlots <= last || reached(p.word32(doneAt(n)).Load(), n)
}

func (p *seqPage) word32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&p.mem[off]))
}

// reached compares a 32-bit stream word with operation n as the driver's
// CU_STREAM_WAIT_VALUE_GEQ does: (int32_t)(word - n) >= 0.
func reached(v uint32, n uint64) bool { return int32(v-uint32(n)) >= 0 }

// hostRegFlags: CU_MEMHOSTREGISTER_PORTABLE (every context) and
// CU_MEMHOSTREGISTER_DEVICEMAP (a device address for it).
const hostRegFlags = 0x1 | 0x2

// register maps the page for the GPU (cuMemHostRegister), so that a stream writes
// or waits on its words with stream memory operations. Context current.
func (p *seqPage) register(d *driver.Driver) error {
	ptr := unsafe.Pointer(&p.mem[0])
	if err := d.HostRegister(ptr, seqBytes, hostRegFlags); err != nil {
		return fmt.Errorf("cuda: registering a same-GPU sequence page with the GPU: %w", err)
	}
	dev, err := d.HostDevicePointer(ptr)
	if err != nil {
		_ = d.HostUnregister(ptr)
		return fmt.Errorf("cuda: the device address of a same-GPU sequence page: %w", err)
	}
	p.dev = dev
	return nil
}

// unmap unregisters the page if it was registered here (context current: the
// unregister waits for the context's work) and unmaps it.
func (p *seqPage) unmap(d *driver.Driver) error {
	var err error
	if p.dev != 0 {
		err = d.HostUnregister(unsafe.Pointer(&p.mem[0]))
		p.dev = 0
	}
	if uerr := unix.Munmap(p.mem); err == nil {
		err = uerr
	}
	return err
}

// wait calls ready until it reports true: a few thousand tight tries (an answer
// within microseconds is the common case), then sleeps that double from 2 us to 200
// us. It gives up, with what's error, at deadline (ErrSameGPUTimeout) or as soon as
// the communicator has failed (Watch: a lost peer, missed heartbeats, an abort),
// which it asks every 64 tries and before every sleep: a rank waiting for a peer that
// died or stopped ends within the heartbeat timeout, not the operation's timeout.
func (g *SameGPU) wait(deadline time.Time, what func() string, ready func() (bool, error)) error {
	return poll(deadline, g.commErr, what, ready)
}

// waitGPU is wait for this rank's own GPU work, which no peer holds up: it gives up
// only at deadline, whatever the communicator's state (Close waits so for the
// launcher's last kernels, which may still use the mappings it is about to close).
func (g *SameGPU) waitGPU(deadline time.Time, what func() string, ready func() (bool, error)) error {
	return poll(deadline, func() error { return nil }, what, ready)
}

func poll(deadline time.Time, commErr func() error, what func() string, ready func() (bool, error)) error {
	sleep := 2 * time.Microsecond
	for i := 0; ; i++ {
		ok, err := ready()
		if err != nil || ok {
			return err
		}
		if i%64 == 63 || i >= spinTries {
			if err := commErr(); err != nil {
				return fmt.Errorf("%s, and gave up: the communicator failed: %w", what(), err)
			}
		}
		if i < spinTries {
			if i%64 == 63 {
				runtime.Gosched()
			}
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %s", ErrSameGPUTimeout, what())
		}
		time.Sleep(sleep)
		sleep = min(2*sleep, 200*time.Microsecond)
	}
}

// spinTries is how many times wait asks before it starts to sleep.
const spinTries = 2000

// commErr is the communicator's error (Watch), nil while it has not failed or when
// nothing watches it.
func (g *SameGPU) commErr() error {
	if f := g.errf.Load(); f != nil {
		return (*f)()
	}
	return nil
}
