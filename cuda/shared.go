package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// Shared is a communicator's device scratch, shared with the other ranks of its host:
// each rank makes one device buffer (a page, unused, then the data area) and a flag
// region in host memory the GPUs map (hostflags.go). The buffer is memory that outlives
// its maker (cuMemCreate, exported as a file descriptor: sharedmem.go), which every
// rank of another process fetches over a Unix socket and maps once (a rank of the same
// process uses the pointer itself); so a rank that dies takes nothing from under the
// survivors' queued reads, which see its memory until they unmap it. Where the device or
// driver cannot share memory so, NewShared refuses and says why. The mappings are cached
// for the communicator's life and closed by Close.
//
// The flags order the ranks' device work without the host: each step of a device
// collective has a number, the same on every rank, and a rank's stream writes the
// number (cuStreamWriteValue32) once it has done its part, while the other ranks'
// streams wait for it (cuStreamWaitValue32, "greater or equal"). A rank's flags are
// written into every rank's header, each rank's in a slot of its own (its inbox
// there), and a rank's stream waits only on its own header: so a rank can release its
// own waiting streams (Release: a peer died, the operation timed out, the ranks
// disagree) by writing its own inbox, without releasing anyone else's, whose host
// has not seen the failure and would take garbage for a result (see devfault.go).
type Shared struct {
	d      *Driver
	ctx    Context
	dev    int
	rank   int
	nranks int
	cap    int // bytes of the data area of each rank
	hdr    int // bytes of the header (the inboxes) before each rank's data area

	own     uintptr      // this rank's allocation
	ownSize int          // its mapped bytes (a multiple of the device's granularity)
	server  *SharedMem   // hands own's file descriptor to the peers during NewShared
	bases   []uintptr    // every rank's allocation, as this process addresses it
	opened  []bool       // bases[r] was imported and mapped here (sharedmem.go)
	sizes   []int        // the mapped bytes at bases[r], where opened
	flags   []flagRegion // every rank's flag region, as this process maps it (hostflags.go); a rank of this process's is its own

	exchange func([]byte) ([]byte, error) // the host all-gather of NewShared

	mu         sync.Mutex // serialises the device collectives (the step numbers)
	step       uint32     // the last step number used
	lastStream Stream     // the stream of the last round
	closed     bool
	p2p        p2pState     // point-to-point's chunk counts (devp2p.go)
	cur        *opDesc      // the operation being enqueued (runOp), nil for one without a descriptor
	curFirst   uint32       // its first round
	curStart   event        // the event recorded before its first round
	ops        []pendingOp  // the operations enqueued and not seen finished (devfault.go)
	spare      []event      // events of finished operations, for the next ones
	watch      *watch       // the watcher, once Watch has started it
	commErr    func() error // the communicator's error (WatchConfig.Err), once Watch was called; Close's waits end on it
	failed     error        // why the scratch was released, once it was
	mpsLine    string       // ranks share a GPU under MPS: the INIT log's line (ShareUnderMPS)
	mpsWhy     string       // ranks share a GPU (ShareUnderMPS): how this rank found out whether it is an MPS client
	ringSeq    uint32       // the last ring unit number posted (devring.go)
}

// A rank's header holds one slot per rank (its inbox for that rank's flags and
// descriptor, written by that rank's stream); the data area follows the header. The
// offsets of the words in a slot:
const (
	flagReady    = 0  // the rank's input for step n is in its data area
	flagReduced  = 4  // the rank has reduced its share of step n
	flagReadDone = 8  // the rank has read what it needed of every data area for step n
	descShape    = 12 // the operation's descriptor (see opDesc): its shape word,
	descShapeNeg = 16 //   the same negated,
	descCount    = 20 //   its count word,
	descCountNeg = 24 //   the same negated
	flagRing     = 28 // the last ring unit the rank has done (devring.go)
	slotBytes    = 32
)

// headerBytes is the size of the header of a scratch shared by nranks ranks: a slot
// each, in whole pages.
func headerBytes(nranks int) int { return (nranks*slotBytes + 4095) &^ 4095 }

// peerRecord is what each rank tells the others about its scratch, in the exchange.
type peerRecord struct {
	ok      bool
	proc    uint64  // processID of its process
	pid     int     // its pid, to open its flag region's memfd through /proc (hostflags.go)
	flagsFD int     // its flag region's memfd (hostflags.go)
	flags   uintptr // the region's device address in its process
	dev     int
	base    uintptr
	cap     int // data bytes of its scratch: every rank must have the same
	handle  [ipcHandleSize]byte
	bus     string // its device's PCI bus id: names the GPU across processes
	reason  string
	mps     bool // a client of an MPS server on its GPU (asked only with ShareUnderMPS)
}

const recordBytes = 1 + 8 + 8 + 8 + 8 + ipcHandleSize + busIDBytes + 128 + 24 + 1

// recordTail is where the record's last fields start: pid, flag region fd and
// address, MPS.
const recordTail = recordBytes - 25

func (r peerRecord) encode() []byte {
	b := make([]byte, recordBytes)
	if r.ok {
		b[0] = 1
	}
	binary.LittleEndian.PutUint64(b[1:], r.proc)
	binary.LittleEndian.PutUint64(b[9:], uint64(r.dev))
	binary.LittleEndian.PutUint64(b[17:], uint64(r.base))
	binary.LittleEndian.PutUint64(b[25:], uint64(r.cap))
	copy(b[33:], r.handle[:])
	copy(b[33+ipcHandleSize:33+ipcHandleSize+busIDBytes], r.bus)
	copy(b[33+ipcHandleSize+busIDBytes:recordTail], r.reason)
	binary.LittleEndian.PutUint64(b[recordTail:], uint64(r.pid))
	binary.LittleEndian.PutUint64(b[recordTail+8:], uint64(r.flagsFD))
	binary.LittleEndian.PutUint64(b[recordTail+16:], uint64(r.flags))
	if r.mps {
		b[recordTail+24] = 1
	}
	return b
}

func decodeRecord(b []byte) (peerRecord, error) {
	if len(b) != recordBytes {
		return peerRecord{}, fmt.Errorf("cuda: a peer's device scratch record is %d bytes, want %d", len(b), recordBytes)
	}
	r := peerRecord{ok: b[0] == 1, proc: binary.LittleEndian.Uint64(b[1:]),
		dev: int(binary.LittleEndian.Uint64(b[9:])), base: uintptr(binary.LittleEndian.Uint64(b[17:])),
		cap: int(binary.LittleEndian.Uint64(b[25:]))}
	copy(r.handle[:], b[33:])
	r.bus = nulTerminated(b[33+ipcHandleSize : 33+ipcHandleSize+busIDBytes])
	r.reason = nulTerminated(b[33+ipcHandleSize+busIDBytes : recordTail])
	r.pid = int(binary.LittleEndian.Uint64(b[recordTail:]))
	r.flagsFD = int(binary.LittleEndian.Uint64(b[recordTail+8:]))
	r.flags = uintptr(binary.LittleEndian.Uint64(b[recordTail+16:]))
	r.mps = b[recordTail+24] == 1
	return r, nil
}

// RecordBytes is the size of the record each rank contributes to the exchange.
const RecordBytes = recordBytes

// ErrNotShared means the ranks cannot share device memory (one of them could not
// export or map it, or two of their devices cannot access each other): the caller
// stages through host memory instead. Every rank gets it together.
var ErrNotShared = errors.New("cuda: the ranks cannot share device memory")

// ErrDeviceShared means two ranks run on one GPU and NewShared was asked, by
// StageWhenDeviceShared, to stage then: it wraps ErrNotShared.
var ErrDeviceShared = fmt.Errorf("%w: two ranks share one GPU", ErrNotShared)

// SharedOption changes how NewShared decides.
type SharedOption func(*sharedOptions)

type sharedOptions struct {
	stageWhenDeviceShared bool
	mps                   func(bus string) MPSStatus
}

// StageWhenDeviceShared makes NewShared refuse (ErrDeviceShared, every rank together)
// when two ranks run on the same GPU. Without MPS two processes on one GPU take turns
// on it, and a stream waiting on the device path's flags holds the GPU from the other
// rank's compute: measured on an H100, the lecture's DDP step took 164 ms on the device
// path and 56 ms staged with 2 ranks sharing it.
func StageWhenDeviceShared() SharedOption {
	return func(o *sharedOptions) { o.stageWhenDeviceShared = true }
}

// ShareUnderMPS lets StageWhenDeviceShared's ranks that share a GPU take the device
// path when every one of them is a client of an MPS server there (detect answers for
// this rank's GPU, by bus id: LocalMPS on a real machine). Their contexts then do not
// take turns on the GPU, and a stream that waits does not hold the others back.
// Shared.MPS says so for the INIT log; a refusal names a rank that is not a client.
func ShareUnderMPS(detect func(bus string) MPSStatus) SharedOption {
	return func(o *sharedOptions) { o.mps = detect }
}

// MPS is, when ShareUnderMPS let ranks that share a GPU take the device path, the
// line that says so ("MPS active on GPU ... : GPU-side waits allowed"), else "".
func (s *Shared) MPS() string { return s.mpsLine }

// MPSDetail is how this rank found out whether it is an MPS client (asked with
// ShareUnderMPS when ranks share a GPU), else "".
func (s *Shared) MPSDetail() string { return s.mpsWhy }

// sharedGPU returns the first two ranks whose records name the same GPU, or -1, -1.
func sharedGPU(recs []peerRecord) (int, int) {
	first := map[string]int{}
	for r, rec := range recs {
		if rec.bus == "" {
			continue
		}
		if q, ok := first[rec.bus]; ok {
			return q, r
		}
		first[rec.bus] = r
	}
	return -1, -1
}

// NewShared allocates this rank's scratch of dataBytes in context ctx and exchanges
// the handles with the other ranks through exchange, which must be an all-gather of
// each rank's RecordBytes-byte record over the communicator (a host collective; it
// runs once). Every rank gets the same answer: a *Shared, or an error wrapping
// ErrNotShared when any rank cannot take part (it then frees what it allocated).
func NewShared(d *Driver, ctx Context, rank, nranks, dataBytes int, exchange func([]byte) ([]byte, error), opts ...SharedOption) (*Shared, error) {
	var o sharedOptions
	for _, opt := range opts {
		opt(&o)
	}
	if nranks > maxRanks {
		return nil, fmt.Errorf("%w: %d ranks; the device path takes at most %d", ErrNotShared, nranks, maxRanks)
	}
	s := &Shared{d: d, ctx: ctx, rank: rank, nranks: nranks, cap: dataBytes &^ 255, hdr: headerBytes(nranks),
		bases: make([]uintptr, nranks), opened: make([]bool, nranks), sizes: make([]int, nranks), flags: make([]flagRegion, nranks), exchange: exchange}
	defer s.stopServing() // every peer has fetched the scratch, or given up, by the last round
	for r := range s.flags {
		s.flags[r].fd = -1
	}
	me := peerRecord{proc: processID, pid: os.Getpid()}
	err := d.Do(ctx, func() (err error) {
		if s.dev, err = d.ContextDevice(ctx); err != nil {
			return err
		}
		me.bus, err = d.BusID(s.dev)
		return err
	})
	if o.stageWhenDeviceShared {
		// Decided from the bus ids before anything is allocated or exported.
		if err := s.refuseSharedGPU(me, err, o.mps); err != nil {
			return nil, err
		}
	}
	if err == nil {
		err = d.Do(ctx, s.allocate(&me))
	}
	if err == nil {
		// The zeroed flags must be in place before any peer's stream reads them.
		_, err = s.syncLegacy(nil, time.Now().Add(time.Minute), nil)
	}
	me.dev, me.base, me.cap = s.dev, s.own, s.cap
	me.ok = err == nil
	if err != nil {
		me.reason = err.Error()
	}
	all, xerr := exchange(me.encode())
	if xerr == nil && len(all) != nranks*recordBytes {
		xerr = fmt.Errorf("cuda: the scratch exchange returned %d bytes, want %d", len(all), nranks*recordBytes)
	}
	if xerr != nil {
		s.release()
		return nil, fmt.Errorf("exchanging device scratch handles: %w", xerr)
	}
	recs := make([]peerRecord, nranks)
	for r := range recs {
		if recs[r], err = decodeRecord(all[r*recordBytes : (r+1)*recordBytes]); err != nil {
			s.release()
			return nil, err
		}
	}
	for r, rec := range recs {
		if !rec.ok {
			s.release()
			return nil, fmt.Errorf("%w: rank %d could not export its scratch: %s", ErrNotShared, r, rec.reason)
		}
		if rec.cap != recs[0].cap {
			s.release()
			return nil, fmt.Errorf("cuda: rank %d has %d bytes of device scratch and rank 0 has %d: the scratch size (GONCCL_DEVICE_SCRATCH) must be the same on every rank", r, rec.cap, recs[0].cap)
		}
	}
	var errs []error
	err = d.Do(ctx, func() error {
		for r, rec := range recs {
			if r == rank || rec.bus == me.bus {
				continue // the same GPU: nothing to ask
			}
			// Ordinals are the process's own (CUDA_VISIBLE_DEVICES numbers the GPUs
			// each process sees from 0): a peer's GPU is found by its bus id. One this
			// process does not see is left to cuIpcOpenMemHandle, whose refusal takes
			// every rank to the staged path below.
			if peer, ok := d.DeviceByBusID(rec.bus); ok {
				if can, err := d.CanAccessPeer(s.dev, peer); err != nil || !can {
					// Short: the reason travels in a record of 128 bytes.
					why := fmt.Sprintf("GPUs %s (rank %d) and %s (rank %d) cannot access each other's memory", me.bus, rank, rec.bus, r)
					if err != nil {
						why += fmt.Sprintf(" (%v)", err)
					}
					errs = append(errs, errors.New(why))
				}
			}
		}
		if q := sameContextRank(recs, rank, me.proc, s.dev); q >= 0 && hardwareQueueCount() == 1 {
			// Their streams share the context's one queue: a stream of one waiting on
			// the GPU for the other would hold back the very work it waits for.
			errs = append(errs, fmt.Errorf("ranks %d and %d share one context, whose streams share 1 hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1)", min(q, rank), max(q, rank)))
		}
		if len(errs) > 0 {
			return nil
		}
		for r, rec := range recs {
			switch {
			case r == rank:
				s.bases[r] = s.own
			case rec.proc == me.proc:
				// a rank of this process: the same address space, but a kernel of this
				// rank's device needs access to memory of another's (sharedmem.go)
				s.bases[r], s.flags[r].dev = rec.base, rec.flags
				if rec.bus != me.bus {
					if err := s.grantScratch(rec.base, rec.handle); err != nil {
						errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
					}
				}
			default:
				p, n, err := s.importScratch(rec.handle)
				if err != nil {
					errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
					continue
				}
				s.bases[r], s.opened[r], s.sizes[r] = p, true, n
				if s.flags[r], err = openFlagRegion(d, rec.pid, rec.flagsFD, flagRegionBytes(s.hdr, nranks)); err != nil {
					errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
				}
			}
		}
		return nil
	})
	errs = append(errs, err)
	return s.agreeMapped(errs)
}

// sameContextRank returns another rank of this process (proc) on device dev, whose
// streams are then in this rank's context, or -1.
func sameContextRank(recs []peerRecord, rank int, proc uint64, dev int) int {
	for q, rec := range recs {
		if q != rank && rec.proc == proc && rec.dev == dev {
			return q
		}
	}
	return -1
}

// allocate allocates and exports this rank's scratch (context current).
func (s *Shared) allocate(me *peerRecord) func() error {
	return func() (err error) {
		d := s.d
		if me.handle, err = s.exportScratch(s.hdr + s.cap + p2pBytes(s.cap, s.nranks)); err != nil {
			return err
		}
		// The flags start at 0 (a new memfd is zeroed).
		if s.flags[s.rank], err = newFlagRegion(d, flagRegionBytes(s.hdr, s.nranks)); err != nil {
			return err
		}
		me.flagsFD, me.flags = s.flags[s.rank].fd, s.flags[s.rank].dev
		return nil
	}
}

// refuseSharedGPU all-gathers the ranks' bus ids (me, with err if this rank could not
// read its own) and returns ErrDeviceShared, every rank together, if two ranks are on
// one GPU, unless mps (ShareUnderMPS) says every rank sharing a GPU is an MPS client:
// that is asked, and exchanged in a second round, only when a GPU is shared. Nothing
// is allocated yet.
func (s *Shared) refuseSharedGPU(me peerRecord, err error, mps func(bus string) MPSStatus) error {
	me.ok = err == nil
	if err != nil {
		me.reason = err.Error()
	}
	recs, err := s.exchangeRecords(me, "device bus ids")
	if err != nil {
		return err
	}
	// Every rank judges every pair the same way, so they all agree.
	q, r := sharedGPU(recs)
	if q < 0 {
		return nil
	}
	if mps == nil {
		return fmt.Errorf("%w: ranks %d and %d are both on GPU %s", ErrDeviceShared, q, r, recs[q].bus)
	}
	sharing := 0
	for _, rec := range recs {
		if rec.bus == me.bus {
			sharing++
		}
	}
	if me.bus != "" && sharing > 1 {
		st := mps(me.bus)
		me.mps, s.mpsWhy = st.Client, st.Why
	}
	if recs, err = s.exchangeRecords(me, "MPS clients"); err != nil {
		return err
	}
	line, nc := mpsVerdict(recs)
	if nc >= 0 {
		return fmt.Errorf("%w: ranks %d and %d are both on GPU %s, and rank %d is not a client of an MPS server there", ErrDeviceShared, q, r, recs[q].bus, nc)
	}
	s.mpsLine = line
	return nil
}

// exchangeRecords all-gathers me and decodes every rank's record (what names the
// round in an error).
func (s *Shared) exchangeRecords(me peerRecord, what string) ([]peerRecord, error) {
	all, err := s.exchange(me.encode())
	if err == nil && len(all) != s.nranks*recordBytes {
		err = fmt.Errorf("cuda: the scratch exchange returned %d bytes, want %d", len(all), s.nranks*recordBytes)
	}
	if err != nil {
		return nil, fmt.Errorf("exchanging %s: %w", what, err)
	}
	recs := make([]peerRecord, s.nranks)
	for r := range recs {
		if recs[r], err = decodeRecord(all[r*recordBytes : (r+1)*recordBytes]); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// agreeMapped is NewShared's second round, so that a rank that could not map a peer's
// scratch (errs) takes every rank back to the staged path with it.
func (s *Shared) agreeMapped(errs []error) (*Shared, error) {
	mapped := peerRecord{ok: errors.Join(errs...) == nil}
	if !mapped.ok {
		mapped.reason = errors.Join(errs...).Error()
	}
	all, xerr := s.exchange(mapped.encode())
	if xerr == nil && len(all) != s.nranks*recordBytes {
		xerr = fmt.Errorf("cuda: the scratch exchange returned %d bytes, want %d", len(all), s.nranks*recordBytes)
	}
	if xerr != nil {
		s.release()
		return nil, fmt.Errorf("exchanging device scratch handles: %w", xerr)
	}
	for r := range s.nranks {
		rec, err := decodeRecord(all[r*recordBytes : (r+1)*recordBytes])
		if err == nil && !rec.ok {
			err = fmt.Errorf("%w: rank %d could not map its peers' scratch: %s", ErrNotShared, r, rec.reason)
		}
		if err != nil {
			s.release()
			return nil, err
		}
	}
	return s, nil
}

// Cap is the data bytes of each rank's scratch.
func (s *Shared) Cap() int { return s.cap }

// Device is the device of this rank's scratch.
func (s *Shared) Device() int { return s.dev }

// unmapPeers closes the mappings of the peers' scratch and flag regions. Context
// current.
func (s *Shared) unmapPeers() error {
	var errs []error
	for r, p := range s.bases {
		if s.opened[r] {
			errs = append(errs, s.d.MemUnmapShared(p, s.sizes[r]))
			s.opened[r] = false
		}
		s.bases[r] = 0
		if r == s.rank {
			continue
		}
		if f := &s.flags[r]; f.host != nil || f.fd >= 0 {
			errs = append(errs, f.close(s.d))
		}
		s.flags[r].dev = 0
	}
	return errors.Join(errs...)
}

// release closes the mappings and frees the allocation.
func (s *Shared) release() error {
	s.setAbort()
	var errs []error
	err := s.d.Do(s.ctx, func() error {
		errs = append(errs, s.unmapPeers())
		if s.own != 0 {
			errs = append(errs, s.d.MemUnmapShared(s.own, s.ownSize))
			s.own = 0
		}
		if f := &s.flags[s.rank]; f.host != nil || f.fd >= 0 {
			errs = append(errs, f.close(s.d))
		}
		s.flags[s.rank].dev = 0
		errs = append(errs, s.p2pRelease())
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// Close frees this rank's scratch and unmaps the peers'. It is collective: every
// rank calls it (at communicator destroy), and it waits, up to timeout, until every
// rank's stream has read what it needed of every scratch (their readDone flags in
// this rank's header, waited for on the legacy default stream), then for every rank
// to have seen that (a host all-gather through the exchange of NewShared), so no
// stream reads memory that is gone. Then every rank unmaps its peers' scratch, and
// only once every rank has (a second all-gather) does any free its own: an exporter
// that frees memory a peer still maps pulls it from under that peer. If that fails
// (a rank died or stopped issuing), the memory is left mapped rather than freed under
// a reader, and Close says so.
func (s *Shared) Close(timeout time.Duration) error {
	// The async point-to-point lanes enqueue the chunks Close's waits count.
	lanesErr := s.drainLanes(time.Now().Add(timeout))
	if lanesErr != nil {
		s.laneFailed(fmt.Errorf("cuda: closing the device scratch: %w", lanesErr))
	}
	if s.Err() == nil {
		s.stopWatch() // a released scratch's watcher goes on until the streams have drained
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed && s.own == 0 {
		return nil
	}
	s.closed = true
	if s.failed != nil {
		// Released (devfault.go): the flags say nothing any more, and a peer's
		// stream may still read this memory.
		return fmt.Errorf("cuda: device scratch left mapped: it was released after %w", s.failed)
	}
	step := s.step
	// A peer that died after its last operation was issued here never reads what this
	// rank's stream waits for: the communicator's error ends the wait (the watcher,
	// stopped above, no longer watches it).
	pending, err := s.syncLegacy(func() error {
		for p := range s.nranks {
			if err := s.d.StreamWaitValue32(StreamLegacy, s.flag(p, flagReadDone), step); err != nil {
				return err
			}
		}
		return s.p2pQuiesce()
	}, time.Now().Add(timeout), s.commErr)
	if err != nil {
		s.releaseClose(err, pending)
		return fmt.Errorf("cuda: device scratch left mapped: %w", err)
	}
	if _, err = s.exchange(peerRecord{ok: true}.encode()); err != nil {
		return fmt.Errorf("cuda: device scratch left mapped: %w", err)
	}
	s.setAbort() // every stream is past its last read: only a stray kernel would see it
	uerr := s.d.Do(s.ctx, s.unmapPeers)
	if _, err = s.exchange(peerRecord{ok: true}.encode()); err != nil {
		return errors.Join(uerr, fmt.Errorf("cuda: device scratch left allocated (the peers may still map it): %w", err))
	}
	return errors.Join(uerr, s.destroyEvents(time.Now().Add(timeout)), s.release())
}

// releaseClose gives up after Close's waits did not finish in time (a peer died or
// stopped issuing before its last reads): the waits it left on the legacy default
// stream are on this rank's own flags, so it releases them as the watcher would
// (devfault.go), again until the stream has run them (pending, the event recorded
// after them, has completed) or a second has passed, lest the stream hold up every
// blocking stream of the context for ever. The scratch stays mapped and failed (a
// later Close does not free it). s.mu held.
func (s *Shared) releaseClose(why error, pending event) {
	if s.failed == nil {
		s.failed = fmt.Errorf("closing the device scratch: %w", why)
	}
	s.setAbort()
	deadline := time.Now().Add(time.Second)
	var w waiter
	for s.releaseLocked() == nil && pending != 0 {
		var done bool
		if err := s.d.Do(s.ctx, func() (err error) { done, err = s.d.EventDone(pending); return err }); err != nil {
			break
		}
		if done {
			_ = s.d.Do(s.ctx, func() error { return s.d.EventDestroy(pending) })
			break
		}
		if time.Now().After(deadline) {
			break // pending is left: its record has not run
		}
		w.Wait()
	}
}

// Abandon marks the scratch unusable without touching the peers: the memory stays
// mapped, as a peer's stream may still read it. Streams of this rank still waiting
// on a flag stay waiting: see Abort for a communicator abort.
func (s *Shared) Abandon() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// syncLegacy enqueues f's work (if any) on the legacy default stream of s.ctx and
// waits until the stream has run it and everything before it, or deadline, or stop (if
// not nil) returns an error, which it then returns. Past the deadline (or on stop's
// error) it returns the event it recorded after that work, still pending (pending):
// destroying it before its record has run would be a fault (the fake driver's
// reading of CUDA's rules); releaseClose waits on it.
func (s *Shared) syncLegacy(f func() error, deadline time.Time, stop func() error) (pending event, err error) {
	var ev event
	err = s.d.Do(s.ctx, func() (err error) {
		if f != nil {
			if err = f(); err != nil {
				return err
			}
		}
		if ev, err = s.d.EventCreate(); err != nil {
			return err
		}
		return s.d.EventRecord(ev, StreamLegacy)
	})
	if err != nil {
		return 0, err
	}
	var w waiter
	for {
		var ok bool
		if err := s.d.Do(s.ctx, func() (err error) { ok, err = s.d.EventDone(ev); return err }); err != nil || ok {
			_ = s.d.Do(s.ctx, func() error { return s.d.EventDestroy(ev) })
			return 0, err
		}
		if time.Now().After(deadline) {
			return ev, fmt.Errorf("the other ranks' device work did not reach this point in time")
		}
		if stop != nil {
			if err := stop(); err != nil {
				return ev, fmt.Errorf("the other ranks' device work will not reach this point: %w", err)
			}
		}
		w.Wait()
	}
}

func (s *Shared) data(r int) uintptr { return s.bases[r] + uintptr(s.hdr) }

// abortWord is the device address of this rank's abort word, in its own flag region
// (host memory the GPU maps: hostflags.go), after its point-to-point flags: the word
// every kernel of this rank that reads a peer's memory reads first
// (kernels.Reducer.ReduceIntoUnless), touching nothing once it is set.
func (s *Shared) abortWord() uintptr {
	return s.flags[s.rank].dev + uintptr(s.hdr+p2pFlagsBytes(s.nranks))
}

// setAbort sets this rank's abort word, from the host, so that the kernels still queued
// on its streams touch no peer's memory when they run. It comes before anything that
// lets a queued kernel run early (releaseLocked's writes) or takes a peer's memory away
// (unmapPeers): a GPU that sees a released wait sees the word set before it (host
// stores to the region are seen in order). Never cleared: the scratch is not used
// again.
func (s *Shared) setAbort() {
	if s.own == 0 || s.flags[s.rank].host == nil {
		return
	}
	s.storeOwn(s.abortWord(), 1)
}

// flag is where this rank's stream reads word off of rank r's slot: in its own header.
func (s *Shared) flag(r, off int) uintptr { return s.inbox(s.rank, r, off) }

// inbox is the (device) address of word off of rank r's slot in rank q's header.
func (s *Shared) inbox(q, r, off int) uintptr {
	return s.flags[q].dev + uintptr(r*slotBytes+off)
}

// LogInit writes msg as one INIT line at INFO (GONCCL_DEBUG=INFO).
func LogInit(msg string) { logInfo(msg) }
