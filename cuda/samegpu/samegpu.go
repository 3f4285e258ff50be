package samegpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
)

// SameGPU is the same-GPU path: collectives among ranks (processes, or communicators
// of one process) whose streams all run on one GPU. An operation is one launch by one
// rank, the launcher (rank 0), of kernels that read every rank's input and write every
// rank's output, so the operation is one round however many ranks take part:
//
//	every rank:  [copy the input into its exchange buffer]; host publishes its buffers
//	             (readySeq_r = n, shared memory)
//	launcher:    host waits for every peer's readySeq_p >= n (the peers' hosts, not
//	             their GPU work), maps their buffers; enqueues on its stream: wait for
//	             every peer's stream to reach n | kernels | tell every peer's stream
//	other ranks: host waits for the launcher to have enqueued n (doneSeq >= n);
//	             enqueues on its stream: wait for the launcher's kernels |
//	             [copy the output out of the exchange buffer]
//
// Every call returns once its part is on its stream, before any kernel of the
// operation has run: the streams order each other with stream memory operations on
// words of host memory every rank maps (overlap.go says which, and how a rank whose
// peer died releases its own stream). Without MPS a stream that waits for another
// context's write keeps the GPU's turn while the wait is not met (up to a time slice).
// Host waits spin briefly, then back off (wait), and give up once the communicator has
// failed (Watch).
//
// The launcher reads and writes a rank of its own process's buffers as they are, and
// a rank of another process's only through that rank's exchange buffer: the rank
// copies its input in and its output out on its own stream (the steps in brackets
// above), so the launcher never maps a caller's buffer. The exchange buffer is memory
// that outlives its maker (cuMemCreate, shared as a file descriptor: cuda.ExportMem),
// which the launcher maps from the descriptor: if a follower dies, or its allocator
// frees the tensor it passed, the launcher's kernels already queued on its exchange
// buffer still find the memory there (a CUDA IPC mapping of the tensor's allocation
// would go with the dead process or its cuMemFree, and the access would fault, sticky,
// in the launcher's context). Without such memory the path is refused at setup,
// naming the device attribute.
//
// Nothing is allocated or freed once the sizes have been seen: the exchange buffer
// grows only for a larger operation (geometrically); the launcher releases its mapping
// of an outgrown one once the operations that used it have run (evict), and its maker
// unmaps it at Close (its memory is freed once both have).
type SameGPU struct {
	d       *driver.Driver
	ctx     driver.Context
	rank    int
	nranks  int
	timeout time.Duration
	mu      sync.Mutex
	n       uint64
	own     *seqPage
	ownFD   int
	peers   []*seqPage           // every rank's page (own included)
	samePID []bool               // rank r is in this process: its pointers are usable as they are
	maps    []map[uint64]mapping // launcher: per peer of another process, its exchange buffers mapped here
	dev     int                  // the context's device
	xmem    *cuda.SharedMem      // the exchange buffer (nil: none yet), memory peers map as a file descriptor
	xbuf    uintptr              // xmem.Ptr, or 0
	xcap    int
	xid     uint64                       // the exchange buffer's id in its descriptors (xbufID | a count)
	retired []*cuda.SharedMem            // exchange buffers outgrown, unmapped here at Close (the launcher may map them)
	errf    atomic.Pointer[func() error] // the communicator's error (Watch)
	closed  bool
	failed  error // the first operation that failed: the ranks' sequence numbers may disagree since
	sync    streamSync
}

// mapping is a peer's exchange buffer as this process addresses it (imported from its
// file descriptor).
type mapping struct {
	size    int
	here    uintptr
	used    uint64 // the last operation that used it
	retired bool   // the peer has a newer exchange buffer: released once used has run
}

// maxMappings bounds how many of a peer's exchange buffers the launcher keeps mapped
// (a peer serves one at a time; the ones it outgrew stay mapped only until the
// operations that used them have run): beyond it, mappings the current operation does
// not use are released once their operations have run (a mapping keeps the memory).
const maxMappings = 16

// ErrSameGPUTimeout means a rank of the same-GPU path waited past the communicator's
// timeout for another rank's part of an operation; the error names the rank.
var ErrSameGPUTimeout = errors.New("cuda: timed out on the same-GPU path")

// ErrSameGPUMismatch means the ranks of the same-GPU path called different operations
// (count, type or reduction) at the same point; the error names the rank.
var ErrSameGPUMismatch = errors.New("cuda: the ranks called different operations on the same-GPU path")

// ErrRefused means this rank could not connect to the others' part of the same-GPU
// path (open a peer's sequence page) after every rank had said
// it could take part. The others may have connected (or been refused too: a refused
// rank closes its page), so the caller must agree with them before any takes the path:
// every rank stages if one was refused. The error names the rank and wraps the cause.
var ErrRefused = errors.New("cuda: a rank could not connect to the same-GPU path")

// launcher is the rank that enqueues every operation's work.
const launcher = 0

// sameRecord is what each rank tells the others, once, in NewSameGPU's exchange.
type sameRecord struct {
	ok      bool
	pid, fd int
	proc    uint64 // processID: ranks of one process use each other's pointers as they are
	bus     string
	reason  string
}

const sameRecordBytes = 1 + 8 + 8 + 8 + driver.BusIDBytes + 192

// SameRecordBytes is the size of each rank's record in NewSameGPU's exchange.
const SameRecordBytes = sameRecordBytes

func (r sameRecord) encode() []byte {
	b := make([]byte, sameRecordBytes)
	if r.ok {
		b[0] = 1
	}
	binary.LittleEndian.PutUint64(b[1:], uint64(r.pid))
	binary.LittleEndian.PutUint64(b[9:], uint64(r.fd))
	binary.LittleEndian.PutUint64(b[17:], r.proc)
	o := 25
	copy(b[o:o+driver.BusIDBytes], r.bus)
	o += driver.BusIDBytes
	copy(b[o:len(b)-1], r.reason)
	return b
}

func decodeSameRecord(b []byte) sameRecord {
	r := sameRecord{ok: b[0] == 1, pid: int(binary.LittleEndian.Uint64(b[1:])), fd: int(binary.LittleEndian.Uint64(b[9:])),
		proc: binary.LittleEndian.Uint64(b[17:])}
	o := 25
	r.bus = driver.NulTerminated(b[o : o+driver.BusIDBytes])
	o += driver.BusIDBytes
	r.reason = driver.NulTerminated(b[o:])
	return r
}

// NewSameGPU sets up the same-GPU path for rank of nranks in context ctx. exchange
// must all-gather each rank's SameRecordBytes-byte record over the communicator (it
// runs once). Every rank gets the same answer: a *SameGPU, or an error wrapping
// ErrNotShared when the ranks are not all on one GPU or one of them cannot take part.
func NewSameGPU(d *driver.Driver, ctx driver.Context, rank, nranks int, timeout time.Duration, exchange func([]byte) ([]byte, error)) (*SameGPU, error) {
	g := &SameGPU{d: d, ctx: ctx, rank: rank, nranks: nranks, timeout: timeout, ownFD: -1,
		peers: make([]*seqPage, nranks), samePID: make([]bool, nranks), maps: make([]map[uint64]mapping, nranks)}
	me := sameRecord{pid: os.Getpid(), proc: driver.ProcessID}
	err := g.setupOwn(&me)
	if err != nil {
		me.reason = err.Error()
	} else {
		me.ok = true
	}
	all, xerr := exchange(me.encode())
	if xerr != nil {
		g.Close()
		return nil, fmt.Errorf("cuda: same-GPU setup exchange: %w", xerr)
	}
	if len(all) != nranks*sameRecordBytes {
		g.Close()
		return nil, fmt.Errorf("cuda: same-GPU setup exchange returned %d bytes, want %d", len(all), nranks*sameRecordBytes)
	}
	recs := make([]sameRecord, nranks)
	for r := range recs {
		recs[r] = decodeSameRecord(all[r*sameRecordBytes : (r+1)*sameRecordBytes])
	}
	for r, rec := range recs {
		if !rec.ok {
			g.Close()
			return nil, fmt.Errorf("%w: rank %d cannot take the same-GPU path: %s", cuda.ErrNotShared, r, rec.reason)
		}
		if rec.bus != recs[0].bus {
			g.Close()
			return nil, fmt.Errorf("%w: rank %d is on GPU %s and rank 0 on %s: the same-GPU path needs every rank on one GPU", cuda.ErrNotShared, r, rec.bus, recs[0].bus)
		}
	}
	// Every rank can; a failure from here on is a failure of the machine, not a choice.
	if err := g.connect(recs); err != nil {
		g.Close()
		return nil, fmt.Errorf("%w: rank %d: %w", ErrRefused, rank, err)
	}
	g.startWatch()
	return g, nil
}

// Watch makes every wait of this path for another rank give up as soon as commErr
// (the communicator's error: a lost peer, missed heartbeats, an abort) returns one,
// rather than at the operation's timeout. The error says what the rank waited for and
// wraps commErr's, which names the rank that failed. Call it before the first
// operation; without it, waits end only at the timeout.
func (g *SameGPU) Watch(commErr func() error) {
	if commErr != nil {
		g.errf.Store(&commErr)
	}
}

// setupOwn makes this rank's page and registers it for its stream.
func (g *SameGPU) setupOwn(me *sameRecord) error {
	page, fd, err := newSeqPage()
	if err != nil {
		return err
	}
	g.own, g.ownFD, me.fd = page, fd, fd
	if g.nranks > maxRanks {
		return fmt.Errorf("the same-GPU path takes at most %d ranks, not %d", maxRanks, g.nranks)
	}
	return g.d.Do(g.ctx, func() error {
		dev, err := g.d.ContextDevice(g.ctx)
		if err != nil {
			return err
		}
		g.dev = dev
		if me.bus, err = g.d.BusID(dev); err != nil {
			return err
		}
		// The exchange buffers are memory that outlives its maker, so that the
		// launcher's queued work on a dead follower's buffer does not fault
		// (ops.go): without it the path is refused, with the reason.
		if err := g.d.VMMSupported(dev); err != nil {
			return fmt.Errorf("its exchange buffers need memory shared as file descriptors: %w", err)
		}
		return page.register(g.d)
	})
}

// connect maps the peers' pages.
func (g *SameGPU) connect(recs []sameRecord) error {
	for r, rec := range recs {
		g.samePID[r] = rec.proc == driver.ProcessID
		if r == g.rank {
			g.peers[r] = g.own
			continue
		}
		p, err := openSeqPage(rec.pid, rec.fd)
		if err == nil && driver.TestFault("samegpu-page-refused") {
			// As where /proc/<pid>/fd of another process is closed to this one (a
			// non-dumpable process, another container).
			_ = p.unmap(g.d)
			p, err = nil, fmt.Errorf("cuda: opening the same-GPU sequence page of process %d: %w (test fault)", rec.pid, unix.EACCES)
		}
		if err != nil {
			return fmt.Errorf("rank %d's page: %w", r, err)
		}
		g.peers[r] = p
		g.maps[r] = map[uint64]mapping{}
	}
	// The streams write into the pages of the ranks they order (overlap.go): every
	// follower into the launcher's, the launcher into every follower's.
	return g.d.Do(g.ctx, func() error {
		for r, p := range g.peers {
			if r != g.rank && (g.rank == launcher || r == launcher) {
				if err := p.register(g.d); err != nil {
					return fmt.Errorf("rank %d's page: %w", r, err)
				}
			}
		}
		return nil
	})
}

// Close unmaps the peers' pages and exchange buffers and this rank's exchange buffers
// (once its stream's part of the last operation has run, or the communicator has
// failed); an exchange buffer's memory is freed once the launcher has unmapped it too,
// whenever that is: no rank waits for another's Close, and the callers' buffers were
// never mapped by another process, so they may be freed as soon as Close returns. Call
// it once no rank will start another operation of this path.
func (g *SameGPU) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	keep(g.d.Do(g.ctx, func() error {
		// The stream's part of the last operations may still use the mappings, the
		// exchange buffers and the pages: released if the communicator has failed.
		keep(g.drainOwn(time.Now().Add(g.timeout)))
		g.stopWatch()
		keep(g.watchErr())
		for _, m := range g.maps {
			for _, mp := range m {
				keep(g.unmap(mp))
			}
		}
		// The exchange buffers: the launcher's mappings keep the memory while its
		// stream may still use them (a dead or slow launcher's too), so this rank's
		// own mappings go now.
		for _, m := range g.retired {
			keep(m.Free(g.d))
		}
		if g.xmem != nil {
			keep(g.xmem.Free(g.d))
		}
		g.xmem, g.xbuf, g.retired = nil, 0, nil
		return nil
	}))
	keep(g.d.Do(g.ctx, func() error {
		for r, p := range g.peers {
			if p != nil && r != g.rank {
				keep(p.unmap(g.d))
			}
		}
		if g.own != nil {
			keep(g.own.unmap(g.d))
		}
		return nil
	}))
	if g.ownFD >= 0 {
		keep(closeFD(g.ownFD))
	}
	return first
}
