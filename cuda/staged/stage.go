package staged

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/gonccl/gonccl/cuda/driver"
)

// Region is one device buffer of an operation.
type Region struct {
	Name  string  // for error messages: "sendbuff", "recvbuff"
	Ptr   uintptr // device pointer; 0 with Bytes 0 for a buffer the operation does not use
	Bytes int
	In    bool // the host algorithm reads it: copied device->host before it runs
	Out   bool // the host algorithm writes it: copied host->device after it succeeds
}

// block is one pinned host allocation of the pool.
type block struct {
	p    unsafe.Pointer
	size int
}

func (b *block) bytes() []byte { return unsafe.Slice((*byte)(b.p), b.size) }

// Pool is a communicator's pinned host staging memory: blocks allocated with
// cuMemHostAlloc, reused by later operations once the completion event of the
// operation that last used them has completed, freed by Close.
//
// The pool holds a reference on the primary context it allocates in (when the
// stream's context is its device's primary context, as torch's are), so that the
// context outlives whoever else releases it (the runtime at exit) until Close has
// freed the pinned memory.
type Pool struct {
	d       *driver.Driver
	mu      sync.Mutex
	ctx     driver.Context // a context to free blocks under (the first one allocated in)
	primary int            // the device whose primary context the pool retained, or -1
	free    []*block
	busy    []*Staging // handed out and not yet known to be finished
	last    *Staging   // the last staging whose Before ran: the next waits for its release
	all     int        // bytes allocated
	stats   PoolStats
	back    driver.Stream // the pool's own stream in ctx for the copies back of pipelined stagings; 0: none yet
	noBack  bool          // it could not be made: pipelined stagings copy back on their own stream
	// Device scratch of staged GPU reductions (reduce.go), reused as the pinned
	// blocks are, freed by Close: cuMemAlloc and cuMemFree wait for all work of the
	// context, so they must not run per operation (every large op would wait for the
	// GPU to go idle) nor while another stream of the process waits on a peer.
	devFree []devBlock
	devAll  int // device bytes allocated
}

// devBlock is one device allocation of the pool.
type devBlock struct {
	p    uintptr
	size int
}

// getDevLocked returns free device scratch of at least n bytes, or allocates it,
// rounded up to a power of two so that growing sizes allocate rarely.
func (p *Pool) getDevLocked(ctx driver.Context, n int) (devBlock, error) {
	best := -1
	for i, b := range p.devFree {
		if b.size >= n && (best < 0 || b.size < p.devFree[best].size) {
			best = i
		}
	}
	if best >= 0 {
		b := p.devFree[best]
		p.devFree = append(p.devFree[:best], p.devFree[best+1:]...)
		return b, nil
	}
	size := minBlock
	for size < n {
		size *= 2
	}
	if err := p.adoptContextLocked(ctx); err != nil {
		return devBlock{}, err
	}
	var ptr uintptr
	if err := p.d.Do(ctx, func() (err error) { ptr, err = p.d.MemAlloc(size); return err }); err != nil {
		return devBlock{}, err
	}
	p.devAll += size
	p.stats.DevAllocs++
	return devBlock{ptr, size}, nil
}

// PoolStats counts a pool's allocations, for tests and logs.
type PoolStats struct {
	Allocs, Reuses int // blocks allocated, and blocks handed out again
	Bytes          int // pinned bytes held
	DevAllocs      int // device scratch allocations (staged GPU reductions)
	DevBytes       int // device scratch bytes held
}

// streamKey names one stream: the special handles name a different stream in each
// context.
type streamKey struct {
	ctx driver.Context
	s   driver.Stream
}

// issueOrder is, per stream, the last staging issued on it by any pool: the work of
// every communicator that stages on one stream goes onto it in issue order, as the
// stream would order it (two process groups may share a stream, and a C caller may
// give several communicators the same one).
var issueOrder struct {
	sync.Mutex
	last map[streamKey]*Staging
}

// claimTurn makes st the last staging issued on its stream and returns the one
// issued before it (nil if none is pending).
func claimTurn(st *Staging) *Staging {
	k := streamKey{st.ctx, st.stream}
	issueOrder.Lock()
	defer issueOrder.Unlock()
	if issueOrder.last == nil {
		issueOrder.last = make(map[streamKey]*Staging)
	}
	prev := issueOrder.last[k]
	issueOrder.last[k] = st
	return prev
}

// forgetTurn drops st from the issue order if it is still the last of its stream, so
// a closed pool's stagings are not kept alive by it.
func forgetTurn(st *Staging) {
	k := streamKey{st.ctx, st.stream}
	issueOrder.Lock()
	if issueOrder.last[k] == st {
		delete(issueOrder.last, k)
	}
	issueOrder.Unlock()
}

// minBlock is the smallest pinned allocation: tiny operations share a size class.
const minBlock = 64 << 10

// NewPool returns an empty pool using driver d.
func NewPool(d *driver.Driver) *Pool { return &Pool{d: d, primary: -1} }

// adoptContextLocked makes ctx the pool's context on first use, retaining it if it is
// its device's primary context.
func (p *Pool) adoptContextLocked(ctx driver.Context) error {
	if p.ctx != 0 {
		return nil
	}
	dev, err := p.d.ContextDevice(ctx)
	if err != nil {
		return err
	}
	pctx, err := p.d.RetainPrimary(dev)
	if err != nil {
		return err
	}
	if pctx == ctx {
		p.primary = dev
	} else if err := p.d.ReleasePrimary(dev); err != nil {
		// A context the caller created itself: borrowed, as the caller keeps it alive.
		return err
	}
	p.ctx = ctx
	return nil
}

// Stats returns the pool's counters.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Bytes, s.DevBytes = p.all, p.devAll
	return s
}

// reclaimLocked returns to the free list the blocks of stagings whose completion
// event has completed.
func (p *Pool) reclaimLocked() {
	kept := p.busy[:0]
	for _, s := range p.busy {
		if blocks, ok := s.reclaim(); ok {
			p.free = append(p.free, blocks...)
			continue
		}
		kept = append(kept, s)
	}
	clear(p.busy[len(kept):])
	p.busy = kept
}

// getLocked returns a free block of at least n bytes, or allocates one.
func (p *Pool) getLocked(ctx driver.Context, n int) (*block, error) {
	best := -1
	for i, b := range p.free {
		if b.size >= n && (best < 0 || b.size < p.free[best].size) {
			best = i
		}
	}
	if best >= 0 {
		b := p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
		p.stats.Reuses++
		return b, nil
	}
	size := max(n, minBlock)
	size = (size + 4095) &^ 4095
	if err := p.adoptContextLocked(ctx); err != nil {
		return nil, err
	}
	var ptr unsafe.Pointer
	err := p.d.Do(ctx, func() (err error) {
		ptr, err = p.d.HostAlloc(size)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes of pinned staging memory: %w", size, err)
	}
	p.all += size
	p.stats.Allocs++
	return &block{p: ptr, size: size}, nil
}

// Stage prepares the staging of one operation on stream s (in context ctx): pinned
// host buffers for its regions, returned in Host in the order of regions. Regions
// whose device ranges overlap (in-place operations) share host memory the same way,
// so the host algorithm sees the same aliasing. Call Before and After around the host
// algorithm, or Cancel if the operation never runs.
func (p *Pool) Stage(ctx driver.Context, s driver.Stream, regions []Region) (*Staging, error) {
	return p.stage(ctx, s, regions, true)
}

// StageUnordered is Stage for an operation that is not ordered with the others of its
// stream (point-to-point, which calls CopyIn itself and may wait for a peer): it takes
// no turn in the stream's issue order, so later operations do not wait for it.
func (p *Pool) StageUnordered(ctx driver.Context, s driver.Stream, regions []Region) (*Staging, error) {
	return p.stage(ctx, s, regions, false)
}

func (p *Pool) stage(ctx driver.Context, s driver.Stream, regions []Region, ordered bool) (*Staging, error) {
	st := &Staging{d: p.d, pool: p, ctx: ctx, stream: s, regions: regions, Host: make([][]byte, len(regions)),
		released: make(chan struct{}), queued: make(chan struct{})}
	// Group overlapping regions: sort by start, merge while the next starts before the
	// current group ends.
	idx := make([]int, 0, len(regions))
	for i, r := range regions {
		if r.Bytes > 0 {
			idx = append(idx, i)
		} else {
			st.Host[i] = []byte{}
		}
	}
	sort.Slice(idx, func(a, b int) bool { return regions[idx[a]].Ptr < regions[idx[b]].Ptr })
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reclaimLocked()
	for g := 0; g < len(idx); {
		lo, hi := regions[idx[g]].Ptr, regions[idx[g]].Ptr+uintptr(regions[idx[g]].Bytes)
		e := g + 1
		for e < len(idx) && regions[idx[e]].Ptr < hi {
			hi = max(hi, regions[idx[e]].Ptr+uintptr(regions[idx[e]].Bytes))
			e++
		}
		b, err := p.getLocked(ctx, int(hi-lo))
		if err != nil {
			p.free = append(p.free, st.blocks...)
			return nil, err
		}
		st.blocks = append(st.blocks, b)
		mem := b.bytes()
		for _, i := range idx[g:e] {
			off := int(regions[i].Ptr - lo)
			st.Host[i] = mem[off : off+regions[i].Bytes : off+regions[i].Bytes]
		}
		g = e
	}
	if len(st.blocks) > 0 {
		err := p.d.Do(ctx, func() (err error) {
			st.ev, err = p.d.EventCreate()
			return err
		})
		if err != nil {
			p.free = append(p.free, st.blocks...)
			return nil, err
		}
	}
	p.busy = append(p.busy, st)
	if ordered {
		// The pool's own operations run in its executor's order (last, at Before):
		// only another pool's predecessor is waited for here, as the stream orders it.
		if prev := claimTurn(st); prev != nil && prev.pool != p {
			st.prev = prev
		}
	}
	return st, nil
}

// Close waits (up to timeout) for every staging still in flight and frees the pool's
// pinned memory. Blocks whose copies are still running after timeout are leaked rather
// than freed under the device's feet. The wait is made without holding the pool's
// lock; the caller must not stage through the pool once Close has begun.
func (p *Pool) Close(timeout time.Duration) error {
	p.mu.Lock()
	busy := p.busy
	p.busy, p.last = nil, nil
	p.mu.Unlock()
	// A held staging would keep the next one's copies waiting: closing ends every hold.
	for _, s := range busy {
		s.Release()
		forgetTurn(s)
	}
	deadline := time.Now().Add(timeout)
	var errs []error
	for _, s := range busy {
		if err := s.waitDone(deadline); err != nil {
			errs = append(errs, err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range busy {
		if blocks, ok := s.reclaim(); ok {
			p.free = append(p.free, blocks...)
		}
	}
	for _, b := range p.free {
		if err := p.d.Do(p.ctx, func() error { return p.d.HostFree(b.p) }); err != nil {
			errs = append(errs, err)
		}
		p.all -= b.size
	}
	p.free = nil
	for _, b := range p.devFree {
		if err := p.d.Do(p.ctx, func() error { return p.d.MemFree(b.p) }); err != nil {
			errs = append(errs, err)
		}
		p.devAll -= b.size
	}
	p.devFree = nil
	if p.back != 0 {
		// Work a staging that did not finish in time left on it still runs.
		if err := p.d.Do(p.ctx, func() error { return p.d.StreamDestroy(p.back) }); err != nil {
			errs = append(errs, err)
		}
		p.back = 0
	}
	if p.primary >= 0 && p.all == 0 && p.devAll == 0 {
		// Released only once nothing is left to free in it; leaked blocks keep it.
		if err := p.d.ReleasePrimary(p.primary); err != nil {
			errs = append(errs, err)
		}
		p.primary = -1
	}
	return errors.Join(errs...)
}

// Staging is one operation's passage through the pool.
type Staging struct {
	// Host holds the pinned host buffers standing in for the regions given to Stage.
	Host [][]byte

	d       *driver.Driver
	pool    *Pool
	ctx     driver.Context
	stream  driver.Stream
	regions []Region
	blocks  []*block

	held     bool          // Hold: the next operation's copies wait for Release
	released chan struct{} // closed by Release
	relOnce  sync.Once
	queued   chan struct{} // closed once After or Cancel ran: all its copies are queued
	queOnce  sync.Once
	prev     *Staging // issued before it on its stream (any pool); nil once waited for

	mu       sync.Mutex
	ev       driver.Event // recorded after the D2H copies, then after the H2D copies
	recorded bool         // ev captures every copy enqueued so far
	inFlight bool         // copies were enqueued that ev may not capture: never reuse the blocks
	finished bool         // After or Cancel ran: no more copies will be enqueued
	done     bool         // blocks returned to the pool, ev destroyed

	ch *chunking // pipelined by chunk (StageChunked); nil: the whole operation at once
}

// Hold says that the owner of the operation will queue follow-up work on its stream
// once the operation has completed (the PyTorch backend's copies out of staging
// tensors), which later operations must see: the next staging of the pool to run
// Before queues nothing on its stream until Release. Call it before the next
// operation is issued.
func (s *Staging) Hold() {
	s.mu.Lock()
	s.held = true
	s.mu.Unlock()
}

// Release ends Hold (and is a no-op without it). Idempotent.
func (s *Staging) Release() {
	s.relOnce.Do(func() { close(s.released) })
}

// waitReleased waits, until deadline, for Release if the staging is held.
func (s *Staging) waitReleased(deadline time.Time) error {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if !held {
		return nil
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-s.released:
		return nil
	case <-t.C:
		return fmt.Errorf("cuda: the previous operation on stream %#x was not released in time (its follow-up work was never queued)", uintptr(s.stream))
	}
}

// waitQueued waits, until deadline, until every copy of s is queued on its stream
// (After or Cancel ran) and, if s is held, for its Release.
func (s *Staging) waitQueued(deadline time.Time) error {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-s.queued:
	case <-t.C:
		return fmt.Errorf("cuda: the operation issued before this one on stream %#x, by another communicator, has not run in time: operations of several communicators on one stream run in the order they were issued, so every rank must issue them in the same order", uintptr(s.stream))
	}
	return s.waitReleased(deadline)
}

// markQueued says that every copy of the staging is queued (After or Cancel).
func (s *Staging) markQueued() { s.queOnce.Do(func() { close(s.queued) }) }

// Before enqueues the device->host copies of the input regions on the stream and waits
// (until deadline) for them: the host buffers then hold what the device buffers held
// after all work queued on the stream before this call. Stream work stays in issue
// order: if the operation that ran before it on the pool was held (Hold), it first waits
// for that one's Release; and across communicators that stage on the same stream, if
// the staging issued just before it on the stream was another pool's, it first waits
// until that one has queued its copies and, if held, been released.
func (s *Staging) Before(deadline time.Time) error {
	if err := s.takeTurn(deadline); err != nil {
		return err
	}
	return s.CopyIn(deadline)
}

// takeTurn is Before's wait for the operations issued before it on its stream: another
// pool's predecessor until it has queued its copies (and been released, if held), and
// the pool's own predecessor until released, if held.
func (s *Staging) takeTurn(deadline time.Time) error {
	s.mu.Lock()
	other := s.prev
	s.prev = nil
	s.mu.Unlock()
	if other != nil {
		if err := other.waitQueued(deadline); err != nil {
			return err
		}
	}
	s.pool.mu.Lock()
	prev := s.pool.last
	s.pool.last = s
	s.pool.mu.Unlock()
	if prev != nil {
		return prev.waitReleased(deadline)
	}
	return nil
}

// CopyIn is Before without the wait for a held operation: for operations that are
// not ordered with the others of the pool (point-to-point), called on the issuing
// thread.
func (s *Staging) CopyIn(deadline time.Time) error {
	var err error
	s.mu.Lock()
	err = s.d.Do(s.ctx, func() error {
		for i, r := range s.regions {
			if !r.In || r.Bytes == 0 {
				continue
			}
			s.inFlight = true
			if err := s.d.MemcpyDtoH(s.Host[i], r.Ptr, s.stream); err != nil {
				// Track the copies already enqueued, so the wait below covers them.
				_ = s.recordLocked()
				return withWhat(err, fmt.Sprintf("%s %#x, %d bytes", r.Name, r.Ptr, r.Bytes))
			}
		}
		return s.recordLocked()
	})
	s.mu.Unlock()
	if werr := s.waitDone(deadline); err == nil {
		err = werr
	}
	return err
}

// After finishes the staging: if opErr is nil it enqueues the host->device copies of
// the output regions; in every case it records the completion event on the stream and
// hands the host buffers back to the pool, which reuses them only once the event has
// completed. It returns the error of its own CUDA calls.
func (s *Staging) After(opErr error) error {
	defer s.markQueued()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	if opErr != nil && !s.inFlight {
		return nil // nothing was enqueued: the blocks are free as soon as reclaimed
	}
	return s.d.Do(s.ctx, func() error {
		if opErr == nil {
			for i, r := range s.regions {
				if !r.Out || r.Bytes == 0 {
					continue
				}
				s.inFlight = true
				if err := s.d.MemcpyHtoD(r.Ptr, s.Host[i], s.stream); err != nil {
					// Record what was enqueued, so the blocks can still be reclaimed.
					_ = s.recordLocked()
					return withWhat(err, fmt.Sprintf("%s %#x, %d bytes", r.Name, r.Ptr, r.Bytes))
				}
			}
		}
		return s.recordLocked()
	})
}

// Cancel releases a staging whose operation was never issued.
func (s *Staging) Cancel() {
	s.mu.Lock()
	s.finished = true
	s.prev = nil
	s.mu.Unlock()
	s.markQueued()
	s.Release()
}

// WaitOn makes stream waiter wait for the staging's completion event (the H2D copies
// of the result). After must have run. It is a no-op once the event has completed.
func (s *Staging) WaitOn(waiter driver.Stream) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done || !s.recorded {
		return nil
	}
	ctx, err := s.d.StreamContext(waiter)
	if err != nil {
		return err
	}
	return s.d.Do(ctx, func() error { return s.d.StreamWaitEvent(waiter, s.ev) })
}

// recordLocked records ev on the stream, capturing every copy enqueued so far.
func (s *Staging) recordLocked() error {
	if !s.inFlight {
		return nil
	}
	if err := s.d.EventRecord(s.ev, s.stream); err != nil {
		s.recorded = false
		return err
	}
	s.recorded = true
	return nil
}

// waitDone polls ev until the copies it captured have completed or deadline passes,
// with the staging's context current and the thread in relaxed capture mode for the
// whole wait (made so once, not once per query).
func (s *Staging) waitDone(deadline time.Time) error {
	return s.d.DoRelaxed(s.ctx, func() error {
		var w driver.Waiter
		for {
			s.mu.Lock()
			if s.done || !s.inFlight {
				s.mu.Unlock()
				return nil
			}
			if !s.recorded {
				s.mu.Unlock()
				return fmt.Errorf("cuda: staging copies on stream %#x could not be tracked by an event", uintptr(s.stream))
			}
			ok, err := s.d.EventDoneRelaxed(s.ev)
			s.mu.Unlock()
			if err != nil || ok {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cuda: staging copies on stream %#x did not finish in time (is the stream's earlier work stuck?)", uintptr(s.stream))
			}
			w.Wait()
		}
	})
}

// reclaim returns the staging's blocks if it has finished and its copies are done,
// and destroys its event. The pool calls it under its lock.
func (s *Staging) reclaim() ([]*block, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil, false
	}
	if !s.finished {
		return nil, false
	}
	if s.inFlight {
		if !s.recorded {
			return nil, false // copies not captured by an event: leak rather than reuse
		}
		var ok bool
		err := s.d.Do(s.ctx, func() (err error) {
			ok, err = s.d.EventDone(s.ev)
			return err
		})
		if err != nil || !ok {
			return nil, false
		}
	}
	if s.ev != 0 {
		_ = s.d.Do(s.ctx, func() error { return s.d.EventDestroy(s.ev) })
	}
	if s.ch != nil {
		s.ch.destroyEvents(s)
	}
	s.done = true
	forgetTurn(s)
	return s.blocks, true
}

// withWhat adds detail to a driver error.
func withWhat(err error, what string) error {
	var e *driver.Error
	if errors.As(err, &e) && e.What == "" {
		c := *e
		c.What = what
		return &c
	}
	return err
}
