package cuda

import (
	"github.com/gonccl/gonccl/internal/reduce"
	"github.com/gonccl/gonccl/internal/ringplan"
)

// The device ring: all_reduce (and reduce_scatter, its first half) of large messages
// among three or more ranks whose GPUs
// map each other, by the plan core's host ring follows (internal/ringplan), stepped on
// the caller's stream. Each rank works in its own data area of the shared scratch; at
// each step it reads one chunk of its predecessor's data area through the peer
// mapping, reducing it into its own (reduce-scatter) or copying it (all-gather):
//
//	copy the input into the own data area; write ready = n
//	[first round: wait until every rank's descriptor equals the own]
//	for each unit u (step t, chunk j):
//	    wait prev's ready >= n (t = 0) or prev's ring >= base+u-chunks+1 (it did the same chunk a step earlier)
//	    reduce (or copy) chunk j of segment RecvSeg(t) of prev's data area into the own
//	    write ring = base+u+1 into the own and next's headers
//	copy the own data area to the output; write readDone = n
//
// No rank waits for its successor. An all-gather step t overwrites a partial sum the
// successor read at step t-(N-1); but the rank reached step t through a chain of
// waits, each for the predecessor's step before: N-1 links of it lead back around
// the ring to the successor's step t-(N-1), done. (A wait for it was tried: the tests
// that skip a wait saw no difference without it, and this is why.) The next round's
// input copy waits, in begin, for every rank's readDone of this one.
// Per rank that moves 2(N-1)/N of the bytes, all of them over the link to one
// neighbour, where the one-shot (devcoll.go) reads every peer's scratch at once: the
// same bytes, but spread over every pair of GPUs, which only a full crossbar carries at
// full speed. Small messages keep the one-shot: the ring's 2(N-1) steps each cost a
// flag round trip. Cutting steps into chunks lets a rank's successor start on a chunk
// while the rank is still on the next one.

// ringChunkBytes is the size of the chunks a ring step is cut into.
var ringChunkBytes = 1 << 20

// AllReduceRing is AllReduce by the ring, in rounds of at most the scratch's
// capacity. Which of the two an operation takes is the caller's choice (the router's
// model: internal/devroute); every rank must make the same one.
func (s *Shared) AllReduceRing(st Stream, k Reducer, send, recv uintptr, count int, dt reduce.DataType, op reduce.RedOp) error {
	es := dt.Size()
	per := s.cap / es
	d := reduceDesc(kindAllReduceRing, count, dt, op, -1)
	return s.runOp(&d, func() error {
		return s.rounds(st, count, per, func(r round, first, c int) error {
			off := uintptr(first * es)
			if err := r.input(send+off, c*es); err != nil {
				return err
			}
			if err := r.check(); err != nil { // the first round: every rank agrees
				return err
			}
			p := ringplan.NewAllReduce(s.nranks, s.rank, c, es, ringChunkBytes)
			if err := r.ring(k, p, dt, op, p.Units()); err != nil {
				return err
			}
			return r.copy(recv+off, s.data(s.rank), c*es)
		})
	})
}

// ReduceScatterRing is ReduceScatter by the first half of the ring: the plan over
// the n blocks of a round, block b as segment b+1, so that the segment rank r
// finishes after the reduce-scatter steps, r+1, is its own block.
func (s *Shared) ReduceScatterRing(st Stream, k Reducer, send, recv uintptr, recvCount int, dt reduce.DataType, op reduce.RedOp) error {
	es, n := dt.Size(), s.nranks
	per := s.cap / (es * n) // elements of each block per round
	d := reduceDesc(kindReduceScatterRing, recvCount, dt, op, -1)
	return s.runOp(&d, func() error {
		return s.rounds(st, recvCount, per, func(r round, first, c int) error {
			seg := func(b int) uintptr { return uintptr((b + 1) % n * c * es) }
			for b := range n {
				if err := r.copy(s.data(s.rank)+seg(b), send+uintptr((b*recvCount+first)*es), c*es); err != nil {
					return err
				}
			}
			if err := r.post(flagReady); err != nil {
				return err
			}
			if err := r.check(); err != nil { // the first round: every rank agrees
				return err
			}
			p := ringplan.NewAllReduce(n, s.rank, n*c, es, ringChunkBytes)
			if err := r.ring(k, p, dt, op, (n-1)*p.Chunks); err != nil {
				return err
			}
			return r.copy(recv+uintptr(first*es), s.data(s.rank)+seg(s.rank), c*es)
		})
	})
}

// ring steps the first units of plan p over the data areas (see above): all of them
// for an all_reduce, the reduce-scatter steps' for a reduce_scatter.
func (r round) ring(k Reducer, p ringplan.AllReduce, dt reduce.DataType, op reduce.RedOp, units int) error {
	s, es := r.s, p.ElemSize
	base := s.ringSeq
	own := s.data(s.rank)
	prev, next := p.Prev(), p.Next()
	for u := range units {
		t, j := u/p.Chunks, u%p.Chunks
		var err error
		if t == 0 {
			err = r.wait(prev, flagReady, r.n)
		} else if !fault("skip-ring-wait") {
			err = r.wait(prev, flagRing, base+uint32(u-p.Chunks)+1)
		}
		if err != nil {
			return err
		}
		lo, hi := p.Chunk(p.RecvSeg(t), j)
		dst, src := own+uintptr(lo), r.peerData(prev, es)+uintptr(lo)
		switch {
		case hi == lo:
		case !p.Reduces(t):
			err = r.copy(dst, src, hi-lo)
		default:
			err = k.ReduceIntoUnless(r.st, dst, src, (hi-lo)/es, dt, op, s.abortWord())
			if err == nil && p.Finishes(t) && op == reduce.Avg {
				err = k.DivideBy(r.st, dst, (hi-lo)/es, dt, p.N)
			}
		}
		if err != nil {
			return err
		}
		s.ringSeq = base + uint32(u) + 1
		if err := r.postRing(next, s.ringSeq); err != nil {
			return err
		}
	}
	return nil
}

// postRing writes v into this rank's ring flag in its own header (first: the watcher
// relies on it) and its successor's, the only rank that waits on it.
func (r round) postRing(next int, v uint32) error {
	for _, q := range []int{r.s.rank, next} {
		if err := r.s.d.StreamWriteValue32(r.st, r.s.inbox(q, r.s.rank, flagRing), v); err != nil {
			return err
		}
	}
	return nil
}
