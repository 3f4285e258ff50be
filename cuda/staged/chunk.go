package staged

import (
	"fmt"
	"time"

	"github.com/gonccl/gonccl/cuda/driver"
)

// A staged operation pipelined by chunk (Pool.StageChunked). The operation's count
// elements (per rank block, for the buffers that hold one block per rank) are split
// into chunks; the caller runs one host operation per chunk, in order, on the host
// slices ChunkHost returns. The pinned memory is a ring of window chunks (as many as the
// staging's limit holds, at least two): chunk k uses slot k % window. The first chunk's
// BeforeChunk queues the device->host copies of the first window chunks, each chunk
// followed by an event of its own, and each BeforeChunk waits only for its chunk's
// event: the copies of later chunks run while the host works on earlier ones. Each
// AfterChunk queues the host->device copies of its chunk at once, so they run while the
// host works on the next, and then (refill) the copies to the host of the chunk that
// reuses its slot, window chunks later, on the staging's stream behind an event
// recorded after the copies back: the GPU orders the reuse, the host never waits for
// it. A chunk reads and writes only its own elements of each buffer (in place
// included: NCCL's in-place layouts put a chunk's output where its own input was read),
// so copying a later chunk in after an earlier one is back still reads the inputs the
// stream held when the operation began.

// Piece is one buffer of an operation pipelined by chunk: Blocks blocks of the
// operation's count elements each, back to back from Ptr (1 for a buffer of count
// elements; the number of ranks for all_gather's receive buffer, for instance).
// Blocks 0: a buffer the operation does not use on this rank.
type Piece struct {
	Name    string // for error messages: "sendbuff", "recvbuff"
	Ptr     uintptr
	Blocks  int
	In, Out bool // read (copied to the host), written (copied back) by the operation
}

// chunking is the pipelined part of a Staging.
type chunking struct {
	pieces   []Piece
	count    int            // elements per block
	es       int            // bytes per element
	per      int            // elements per block in one chunk (the last may have fewer)
	n        int            // chunks
	window   int            // chunks whose pinned memory exists at once: chunk k uses slot k % window
	host     [][]byte       // per piece: its pinned memory, slot-major (a slot's blocks together)
	evs      []driver.Event // per chunk: recorded after its device->host copies
	recorded []bool         // per chunk: evs[k] captures its copies
	relEvs   []driver.Event // per slot (with a back stream): recorded on it after the slot's last copies back
	issued   int            // host operations the caller issued (SetIssued); -1 until known
	afters   int            // AfterChunk calls so far
	err      error          // the first failure: no chunk is copied back after it
	red      *gpuReduce     // the reduction runs on the GPU (StageReduceGPU); nil: on the host
	back     driver.Stream  // the stream of the copies back (and the GPU reduction): see backStreamLocked
	backEv   driver.Event   // recorded on back at the end, waited for by the staging's stream
	startEv  driver.Event   // recorded on the staging's stream at chunk 0, waited for by back
	backUsed bool           // work was queued on back
}

// backStreamLocked returns the stream pipelined stagings in ctx queue their copies back
// (and GPU reductions) on: a stream of the pool's own (cuStreamCreate in the pool's
// context, destroyed by Close), so that the copies back of early chunks run beside the
// copies to the host of later ones (a GPU has a copy engine for each direction); the
// staging's stream waits for it at the end. 0 where ctx is not the pool's context, or
// the stream could not be made: then everything goes on the staging's stream. Only
// chunks the host has seen copied in are copied back, so what the staging's stream ran
// before the operation has run; pipelined buffers are disjoint per chunk (in place
// included), so a copy back never overwrites what is still to be read.
func (p *Pool) backStreamLocked(ctx driver.Context) driver.Stream {
	if p.back != 0 || p.noBack || ctx != p.ctx {
		if ctx != p.ctx {
			return 0
		}
		return p.back
	}
	err := p.d.Do(ctx, func() (err error) {
		p.back, err = p.d.StreamCreate()
		return err
	})
	if err != nil {
		p.noBack, p.back = true, 0
		driver.LogInfo(fmt.Sprintf("staged path: no stream of its own (%v): copies back share the caller's stream", err))
	}
	return p.back
}

// out returns the stream chunk copies back go on, noting that it was used.
func (s *Staging) out() driver.Stream {
	if s.ch.back != 0 {
		s.ch.backUsed = true
		return s.ch.back
	}
	return s.stream
}

// ChunkCount returns how many chunks of at most per elements count elements make.
func ChunkCount(count, per int) int {
	if count <= 0 || per <= 0 {
		return 1
	}
	return (count + per - 1) / per
}

// StageChunked prepares the staging of one operation on stream s (in context ctx),
// pipelined in chunks of per elements (of elemSize bytes) of each block of count
// elements, its pinned memory at most limit bytes (the chunks that fit, at least two;
// 0: every chunk's). Call SetIssued with the number of host operations issued for it (at
// most Chunks), and for each chunk k, around its host operation, BeforeChunk(k) and
// AfterChunk(k); Cancel if none is issued.
func (p *Pool) StageChunked(ctx driver.Context, s driver.Stream, pieces []Piece, count, elemSize, per, limit int) (*Staging, error) {
	return p.stageChunked(ctx, s, pieces, count, elemSize, per, limit, 0, nil)
}

// Window returns how many chunks of chunkBytes bytes of pinned memory each, of n, a
// staging limited to limit bytes holds at once: all of them for limit 0, else as many
// as fit, but at least two (one the host works on, one being copied).
func Window(n, chunkBytes, limit int) int {
	if limit <= 0 || n <= 2 {
		return n
	}
	return max(2, min(n, limit/max(1, chunkBytes)))
}

// stageChunked is StageChunked with extra bytes of pinned memory per slot of the ring
// beside the pieces', and setup, run under the pool's lock once the staging's memory
// and events exist, which adds to it (its error undoes everything): it gets the extra
// memory of every slot, slot-major.
func (p *Pool) stageChunked(ctx driver.Context, s driver.Stream, pieces []Piece, count, elemSize, per, limit, extra int,
	setup func(st *Staging, extra []byte) error) (*Staging, error) {
	if count <= 0 || elemSize <= 0 || per <= 0 {
		return nil, fmt.Errorf("cuda: StageChunked: count %d, element size %d, chunk %d elements", count, elemSize, per)
	}
	ch := &chunking{pieces: pieces, count: count, es: elemSize, per: per, n: ChunkCount(count, per),
		host: make([][]byte, len(pieces)), issued: -1}
	ch.evs, ch.recorded = make([]driver.Event, ch.n), make([]bool, ch.n)
	st := &Staging{d: p.d, pool: p, ctx: ctx, stream: s, released: make(chan struct{}), queued: make(chan struct{}), ch: ch}
	slot := extra // pinned bytes of one chunk
	for _, pc := range pieces {
		slot += pc.Blocks * min(per, count) * elemSize
	}
	ch.window = Window(ch.n, slot, limit)
	total := slot * ch.window
	extra *= ch.window
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reclaimLocked()
	if total > 0 {
		b, err := p.getLocked(ctx, total)
		if err != nil {
			return nil, err
		}
		st.blocks = []*block{b}
		mem, off := b.bytes(), 0
		for i, pc := range pieces {
			n := pc.Blocks * min(per, count) * elemSize * ch.window
			ch.host[i] = mem[off : off+n : off+n]
			off += n
		}
		ch.back = p.backStreamLocked(ctx)
		err = p.d.Do(ctx, func() (err error) {
			if st.ev, err = p.d.EventCreate(); err != nil {
				return err
			}
			if ch.back != 0 {
				if ch.backEv, err = p.d.EventCreate(); err != nil {
					return err
				}
				if ch.startEv, err = p.d.EventCreate(); err != nil {
					return err
				}
				if ch.window < ch.n {
					ch.relEvs = make([]driver.Event, ch.window)
					for k := range ch.relEvs {
						if ch.relEvs[k], err = p.d.EventCreate(); err != nil {
							return err
						}
					}
				}
			}
			for k := range ch.evs {
				if ch.evs[k], err = p.d.EventCreate(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			if st.ev != 0 {
				_ = p.d.Do(ctx, func() error { return p.d.EventDestroy(st.ev) })
			}
			ch.destroyEvents(st)
			p.free = append(p.free, b)
			return nil, err
		}
	}
	if setup != nil {
		var ex []byte
		if total > 0 {
			mem := st.blocks[0].bytes()
			ex = mem[total-extra : total : total]
		}
		if err := setup(st, ex); err != nil {
			if st.ev != 0 {
				_ = p.d.Do(ctx, func() error { return p.d.EventDestroy(st.ev) })
			}
			ch.destroyEvents(st)
			p.free = append(p.free, st.blocks...)
			return nil, err
		}
	}
	p.busy = append(p.busy, st)
	if prev := claimTurn(st); prev != nil && prev.pool != p {
		st.prev = prev
	}
	return st, nil
}

// destroyEvents destroys the chunks' events (and what the GPU reduction holds).
func (ch *chunking) destroyEvents(s *Staging) {
	destroy := func(evs []driver.Event) {
		for k, e := range evs {
			if e != 0 {
				_ = s.d.Do(s.ctx, func() error { return s.d.EventDestroy(e) })
				evs[k] = 0
			}
		}
	}
	destroy(ch.evs)
	destroy(ch.relEvs)
	destroy([]driver.Event{ch.backEv, ch.startEv})
	ch.backEv, ch.startEv = 0, 0
	if ch.red != nil {
		destroy(ch.red.evs)
		if ch.red.scratch.p != 0 {
			// Back to the pool (its lock is held): its work has run (the staging's
			// event, or the setup failed before any was queued).
			s.pool.devFree = append(s.pool.devFree, ch.red.scratch)
			ch.red.scratch = devBlock{}
		}
	}
}

// bounds returns the elements [lo, hi) of each block that chunk k covers.
func (ch *chunking) bounds(k int) (lo, hi int) {
	lo = k * ch.per
	return lo, min(ch.count, lo+ch.per)
}

// slotOf returns where chunk k's memory starts in a piece of blocks blocks: its slot
// of the ring.
func (ch *chunking) slotOf(k, blocks int) int {
	return (k % ch.window) * blocks * min(ch.per, ch.count) * ch.es
}

// Window returns how many chunks' pinned memory the staging holds at once (0 for a
// staging not pipelined).
func (s *Staging) Window() int {
	if s.ch == nil {
		return 0
	}
	return s.ch.window
}

// Chunks returns the number of chunks (0 for a staging not pipelined).
func (s *Staging) Chunks() int {
	if s.ch == nil {
		return 0
	}
	return s.ch.n
}

// ChunkHost returns, per piece, the host memory of chunk k: its blocks' share of the
// chunk back to back (nil for a piece not used on this rank).
func (s *Staging) ChunkHost(k int) [][]byte {
	ch := s.ch
	lo, hi := ch.bounds(k)
	out := make([][]byte, len(ch.pieces))
	for i, pc := range ch.pieces {
		if pc.Blocks == 0 {
			continue
		}
		a := ch.slotOf(k, pc.Blocks)
		b := a + pc.Blocks*(hi-lo)*ch.es
		out[i] = ch.host[i][a:b:b]
	}
	return out
}

// copies calls f for every copy of chunk k of the pieces selected by want: the device
// address of one block's share, and its host memory.
func (ch *chunking) copies(k int, want func(Piece) bool, f func(pc Piece, dev uintptr, host []byte) error) error {
	lo, hi := ch.bounds(k)
	size := (hi - lo) * ch.es
	devLo := lo
	if k > 0 && driver.TestFault("chunk-offset") {
		devLo-- // tests: show that a chunk copied from the wrong place is caught
	}
	for i, pc := range ch.pieces {
		if pc.Blocks == 0 || !want(pc) {
			continue
		}
		base := ch.slotOf(k, pc.Blocks)
		for r := 0; r < pc.Blocks; r++ {
			dev := pc.Ptr + uintptr((r*ch.count+devLo)*ch.es)
			h := ch.host[i][base+r*size : base+(r+1)*size]
			if err := f(pc, dev, h); err != nil {
				return withWhat(err, fmt.Sprintf("%s %#x, chunk %d of %d, %d bytes", pc.Name, dev, k, ch.n, size))
			}
		}
	}
	return nil
}

// BeforeChunk readies chunk k for its host operation. For chunk 0 it first waits for
// the operations issued before on the stream (as Before does) and then queues the
// device->host copies of the first window chunks (the others' are queued as slots come
// free: refillLocked); then it waits (until deadline) for chunk k's.
func (s *Staging) BeforeChunk(k int, deadline time.Time) error {
	if k == 0 {
		if err := s.takeTurn(deadline); err != nil {
			return err
		}
		if err := s.copyInChunks(); err != nil {
			return err
		}
	}
	return s.waitChunk(k, deadline)
}

// copyInChunks queues the device->host copies of the chunks of the first window, each
// chunk's followed by its event.
func (s *Staging) copyInChunks() error {
	ch := s.ch
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.Do(s.ctx, func() error {
		if ch.back != 0 {
			// What the copies back (and reductions) on back write, the work queued on the
			// stream before the operation may still be using (a rank with nothing to copy
			// in never waits for that work on the host): back waits for it, not for the
			// copies to the host queued next.
			s.inFlight = true
			if err := s.d.EventRecord(ch.startEv, s.stream); err != nil {
				return err
			}
			if err := s.d.StreamWaitEvent(ch.back, ch.startEv); err != nil {
				return err
			}
		}
		for k := 0; k < ch.window; k++ {
			if err := s.copyInLocked(k, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// copyInLocked queues chunk k's device->host copies on the stream (none if skip) and
// records its event after them; always is for a chunk that reuses a slot, whose event
// must be waited for even with nothing to copy in (the slot's earlier copies back come
// before it). s.mu held, the context current.
func (s *Staging) copyInLocked(k int, always bool) error {
	ch := s.ch
	queued := false
	err := ch.copies(k, func(pc Piece) bool { return pc.In && ch.err == nil }, func(_ Piece, dev uintptr, h []byte) error {
		s.inFlight, queued = true, true
		return s.d.MemcpyDtoH(h, dev, s.stream)
	})
	if err != nil {
		_ = s.recordLocked() // track what was queued, so the blocks can be reclaimed
		return err
	}
	if queued || always {
		s.inFlight = true
		if err := s.d.EventRecord(ch.evs[k], s.stream); err != nil {
			_ = s.recordLocked()
			return err
		}
		ch.recorded[k] = true
	}
	return nil
}

// refillLocked ends chunk k's use of its slot, once its last host operation has ended
// and its copies back (and the GPU's work on the slot) are queued: it queues the copies
// to the host of the chunk window chunks later, which reuses the slot, behind them (on
// the back stream: after an event recorded there, which the staging's stream waits
// for). After a failure nothing is copied in, but the later chunk's event still follows
// the slot's earlier work, so that its host operation (which runs: the peers expect it)
// never writes memory the GPU still reads. s.mu held, the context current.
func (s *Staging) refillLocked(k int) error {
	ch := s.ch
	j := k + ch.window
	if j >= ch.n {
		return nil
	}
	if ch.back != 0 {
		ev := ch.relEvs[k%ch.window]
		s.inFlight = true
		if err := s.d.EventRecord(ev, ch.back); err != nil {
			return err
		}
		if err := s.d.StreamWaitEvent(s.stream, ev); err != nil {
			return err
		}
	}
	return s.copyInLocked(j, true)
}

// waitChunk polls chunk k's event until its copies to the host have completed or
// deadline passes. A chunk with nothing to copy in is ready at once.
func (s *Staging) waitChunk(k int, deadline time.Time) error {
	return s.waitEvent(s.ch.evs, s.ch.recorded, k, deadline, "the copy to the host")
}

// waitEvent polls evs[k], if recorded[k], until it has completed or deadline passes;
// what names the work it tracks.
func (s *Staging) waitEvent(evs []driver.Event, recorded []bool, k int, deadline time.Time, what string) error {
	var w driver.Waiter
	for {
		s.mu.Lock()
		if !recorded[k] {
			s.mu.Unlock()
			return nil
		}
		var ok bool
		err := s.d.Do(s.ctx, func() (err error) {
			ok, err = s.d.EventDone(evs[k])
			return err
		})
		s.mu.Unlock()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cuda: %s of chunk %d of %d on stream %#x did not finish in time (is the stream's earlier work stuck?)", what, k, s.ch.n, uintptr(s.stream))
		}
		w.Wait()
	}
}

// AfterChunk finishes chunk k's host operation: if it and every chunk before it
// succeeded, it queues the chunk's host->device copies, and then the copies to the host
// of the chunk that reuses its pinned memory. Once every issued chunk has finished
// (SetIssued), it records the completion event, as After does. It returns the error of
// its own CUDA calls.
func (s *Staging) AfterChunk(k int, opErr error) error {
	out := func(pc Piece) bool { return pc.Out }
	return s.afterStep(opErr, k, func() error {
		return s.ch.copies(k, out, func(_ Piece, dev uintptr, h []byte) error {
			s.inFlight = true
			return s.d.MemcpyHtoD(dev, h, s.out())
		})
	})
}

// afterStep ends one host operation of the staging: unless it or one before it failed,
// it runs enqueue (under the staging's lock, the context current); if it was chunk
// last's last operation (-1: not one), it refills that chunk's slot; and once every
// issued operation has ended it finishes the staging.
func (s *Staging) afterStep(opErr error, last int, enqueue func() error) error {
	ch := s.ch
	s.mu.Lock()
	ch.afters++
	if opErr != nil && ch.err == nil {
		ch.err = opErr
	}
	var err error
	if ch.err == nil && enqueue != nil {
		if err = s.d.Do(s.ctx, enqueue); err != nil {
			ch.err = err
		}
	}
	if last >= 0 && ch.window < ch.n {
		if rerr := s.d.Do(s.ctx, func() error { return s.refillLocked(last) }); rerr != nil {
			if ch.err == nil {
				ch.err = rerr
			}
			if err == nil {
				err = rerr
			}
		}
	}
	done := ch.issued >= 0 && ch.afters >= ch.issued
	if done {
		if ferr := s.finishChunksLocked(); err == nil {
			err = ferr
		}
	}
	s.mu.Unlock()
	if done {
		s.markQueued()
	}
	return err
}

// AfterOther ends a host operation of the staging that queues nothing itself (a check
// that the ranks agree on the operation): its failure stops every later copy back.
func (s *Staging) AfterOther(opErr error) error { return s.afterStep(opErr, -1, nil) }

// SetIssued says how many of the staging's host operations were issued (the rest never
// will be): the staging finishes once that many of their After hooks (AfterChunk,
// AfterReduce, AfterGather, AfterOther) have run.
func (s *Staging) SetIssued(n int) error {
	s.mu.Lock()
	s.ch.issued = n
	last := s.ch.afters >= n && !s.finished
	var err error
	if last {
		err = s.finishChunksLocked()
	}
	s.mu.Unlock()
	if last {
		s.markQueued()
	}
	return err
}

// finishChunksLocked records the completion event after every copy queued and hands
// the blocks back to the pool (reused once the event has completed).
func (s *Staging) finishChunksLocked() error {
	s.finished = true
	return s.d.Do(s.ctx, func() error {
		if s.ch.backUsed {
			// The stream waits for the copies back: later work on it sees them, and ev
			// (recorded after the wait) captures them.
			err := s.d.EventRecord(s.ch.backEv, s.ch.back)
			if err == nil {
				err = s.d.StreamWaitEvent(s.stream, s.ch.backEv)
			}
			if err != nil {
				// ev could not cover the copies back: leak the blocks rather than reuse them.
				s.recorded = false
				return err
			}
		}
		return s.recordLocked()
	})
}

// ChunkErr returns the first failure of a chunk (nil while none has failed).
func (s *Staging) ChunkErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ch.err
}
