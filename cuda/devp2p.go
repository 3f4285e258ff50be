package cuda

import (
	"errors"
	"fmt"
)

// Point-to-point on the device path: sends and receives between the ranks of a
// Shared, enqueued on the caller's streams, ordered between the two ranks of each
// pair by flags in the scratch and never by the host.
//
// Each rank's allocation holds, after the collectives' data area, a point-to-point
// area: a page of flags, then p2pSlots slots of slotBytes for every destination (its
// own rank included). A message from a to b goes in chunks of at most slotBytes, each
// with a number q, counted per ordered pair (a, b) on both sides (sendSeq on a,
// recvSeq on b): the pair's messages match in the order they were issued, as NCCL's
// do (tags play no part). Chunk q uses slot q % p2pSlots of a's area for b. As for
// the collectives (shared.go), each flag lives in the memory of the rank whose
// stream waits on it, and is written there by the other rank's stream:
//
//	sender a:   wait a's recvd[b] >= q-p2pSlots   (b has copied out the slot's last chunk)
//	            copy the chunk into the slot; write b's sent[a] = q
//	receiver b: wait b's sent[a] >= q
//	            copy the chunk out of a's slot; write a's recvd[b] = q, then b's done[a] = q
//
// (done is the receiver's own count, for Close and the watcher). A rank thus waits
// only on its own page, and can release its own streams by writing it, as it does its
// header when a peer dies or an operation times out (devfault.go, devp2pwatch.go).
//
// A send waits only for its receiver to have drained chunks issued p2pSlots before
// it, so a send whose message fits in p2pSlots chunks never waits on the receiver's
// stream. A group of operations (P2P) is enqueued round by round: the i-th chunk of
// every send, then the i-th chunk of every receive, then the next. A chunk's waits
// are then on chunks strictly earlier in the (round, send-before-receive) order, on
// every rank alike, so no group of matching sends and receives (an exchange between
// two ranks, a ring shift, an all-to-all) can leave the streams waiting on each
// other, however large the messages. Where a flag lives does not change which chunk
// waits for which, so the argument holds as it did with each rank's flags in its own
// memory.
//
// SetTestFault's faults for this file: "p2p-skip-sent-wait" (a receive copies out
// without waiting for the sender's flag), "p2p-offset" (it reads the slot one byte
// early), "p2p-skip-free-wait" (a send overwrites a slot its receiver may not have
// drained).

// p2pSlots is the number of chunks of a pair in flight at once.
const p2pSlots = 2

// p2pFlagStride separates two flags of the point-to-point page.
const p2pFlagStride = 16

// p2pFlagsBytes is the size of the point-to-point flags page for nranks: sent[src],
// then recvd[dst], then done[src], one per rank.
func p2pFlagsBytes(nranks int) int { return (3*nranks*p2pFlagStride + 255) &^ 255 }

// p2pSlotBytes is the size of one slot: the slots of every pair together take half
// the collectives' data area.
func p2pSlotBytes(dataBytes, nranks int) int {
	return max(256, (dataBytes/(2*nranks*p2pSlots))&^255)
}

// p2pBytes is the size of the point-to-point area, which NewShared allocates after
// the data area.
func p2pBytes(dataBytes, nranks int) int {
	return p2pFlagsBytes(nranks) + nranks*p2pSlots*p2pSlotBytes(dataBytes, nranks)
}

// p2pState is the host's count of chunks per pair; s.mu guards it.
type p2pState struct {
	sendSeq []uint32          // chunks sent to each rank
	recvSeq []uint32          // chunks received from each rank
	forks   []event           // Follow's events, destroyed once they have run
	group   p2pGroup          // the group being enqueued (devp2pwatch.go)
	lanes   map[laneKey]*lane // the async operations' lanes (devp2plane.go)
}

// p2pBase is rank r's point-to-point area (its slots after p2pFlagsBytes unused bytes);
// p2pFlagBase its point-to-point flags, in its flag region after its header.
func (s *Shared) p2pBase(r int) uintptr     { return s.bases[r] + uintptr(s.hdr) + uintptr(s.cap) }
func (s *Shared) p2pFlagBase(r int) uintptr { return s.flags[r].dev + uintptr(s.hdr) }

// p2pSentFlag is, in rank r's page, the count of chunks src has put in its slots for
// r (written by src, waited on by r's receives).
func (s *Shared) p2pSentFlag(r, src int) uintptr {
	return s.p2pFlagBase(r) + uintptr(src*p2pFlagStride)
}

// p2pRecvdFlag is, in rank r's page, the count of chunks dst has copied out of r's
// slots for dst (written by dst, waited on by r's sends).
func (s *Shared) p2pRecvdFlag(r, dst int) uintptr {
	return s.p2pFlagBase(r) + uintptr((s.nranks+dst)*p2pFlagStride)
}

// p2pDoneFlag is, in rank r's page, r's own count of chunks it has copied out of
// src's slots (Close waits on it).
func (s *Shared) p2pDoneFlag(r, src int) uintptr {
	return s.p2pFlagBase(r) + uintptr((2*s.nranks+src)*p2pFlagStride)
}

// p2pSlot is slot q % p2pSlots of rank src's area for dst.
func (s *Shared) p2pSlot(src, dst int, q uint32) uintptr {
	sb := p2pSlotBytes(s.cap, s.nranks)
	i := dst*p2pSlots + int(q%p2pSlots)
	return s.p2pBase(src) + uintptr(p2pFlagsBytes(s.nranks)+i*sb)
}

// P2POp is one send or receive of a group enqueued by P2P.
type P2POp struct {
	Recv   bool    // a receive from Peer, else a send to Peer
	Peer   int     // the other rank (this rank itself is allowed)
	Buf    uintptr // device memory of Bytes bytes
	Bytes  int
	Stream Stream // where the op's work is enqueued
}

// p2pChunk is one chunk of a group's op.
type p2pChunk struct {
	op     *P2POp
	off, n int
}

// P2P enqueues a group of sends and receives, each on its own stream, and returns
// without waiting. Every send must be matched, on its peer, by a receive of the same
// size, in the same order for the pair; to make progress the matching operations
// must be enqueued in one group on both ranks, or in groups each rank issues in the
// same order (two single operations enqueued one after the other on one stream may
// otherwise wait for each other, as with NCCL's ungrouped send and receive).
func (s *Shared) P2P(ops []P2POp) error {
	for _, op := range ops {
		if op.Peer < 0 || op.Peer >= s.nranks {
			return fmt.Errorf("cuda: peer %d is not a rank of a communicator of %d", op.Peer, s.nranks)
		}
		if op.Bytes < 0 {
			return fmt.Errorf("cuda: a point-to-point message of %d bytes", op.Bytes)
		}
	}
	follow, err := s.afterLanes(ops)
	if err != nil {
		return err
	}
	sb := p2pSlotBytes(s.cap, s.nranks)
	// The chunks of each (direction, peer), in issue order.
	var queues [2][][]p2pChunk
	for dir := range queues {
		queues[dir] = make([][]p2pChunk, s.nranks)
	}
	rounds := 0
	for i := range ops {
		op := &ops[i]
		dir := 0
		if op.Recv {
			dir = 1
		}
		q := queues[dir][op.Peer]
		for off := 0; off < op.Bytes; off += sb {
			q = append(q, p2pChunk{op: op, off: off, n: min(sb, op.Bytes-off)})
		}
		queues[dir][op.Peer] = q
		rounds = max(rounds, len(q))
	}
	return s.run(func() error {
		if s.closed {
			if s.failed != nil {
				return fmt.Errorf("cuda: the communicator's device scratch was released after %w", s.failed)
			}
			return fmt.Errorf("cuda: the communicator's device scratch is closed")
		}
		if s.p2p.sendSeq == nil {
			s.p2p.sendSeq = make([]uint32, s.nranks)
			s.p2p.recvSeq = make([]uint32, s.nranks)
		}
		for st, lanes := range follow {
			for _, ls := range lanes {
				if err := s.followLocked(st, ls); err != nil {
					return err
				}
			}
		}
		g, err := s.p2pBegin(queues)
		if err != nil {
			return err
		}
		for i := range rounds {
			for dir, byPeer := range queues {
				for peer, q := range byPeer {
					if i >= len(q) {
						continue
					}
					var err error
					if dir == 0 {
						err = s.sendChunk(peer, q[i])
					} else {
						err = s.recvChunk(peer, q[i])
					}
					if err != nil {
						s.spare = append(s.spare, g.starts...) // untracked: Close destroys them
						return err
					}
					g.note(q[i].op.Stream, dir == 1, peer, s.p2p.sendSeq[peer], s.p2p.recvSeq[peer])
				}
			}
		}
		return s.p2pTrack(g)
	})
}

// sendChunk enqueues chunk c of a send to peer, the pair's next. s.mu held, context
// current.
func (s *Shared) sendChunk(peer int, c p2pChunk) error {
	q := s.p2p.sendSeq[peer] + 1
	if err := s.sendChunkAt(peer, c, q, true); err != nil {
		return err
	}
	s.p2p.sendSeq[peer] = q
	return nil
}

// sendChunkAt enqueues chunk c of a send to peer as the pair's chunk q; its stream
// waits for the slot to be free if gpuWait (else the host has seen it is:
// devp2plane.go). s.mu held, context current.
func (s *Shared) sendChunkAt(peer int, c p2pChunk, q uint32, gpuWait bool) error {
	st := c.op.Stream
	if gpuWait && q > p2pSlots && !fault("p2p-skip-free-wait") {
		if err := s.d.StreamWaitValue32(st, s.p2pRecvdFlag(s.rank, peer), q-p2pSlots); err != nil {
			return err
		}
	}
	if err := s.d.MemcpyDtoD(s.p2pSlot(s.rank, peer, q), c.op.Buf+uintptr(c.off), c.n, st); err != nil {
		return err
	}
	return s.d.StreamWriteValue32(st, s.p2pSentFlag(peer, s.rank), q)
}

// recvChunk enqueues chunk c of a receive from peer, the pair's next. s.mu held,
// context current.
func (s *Shared) recvChunk(peer int, c p2pChunk) error {
	q := s.p2p.recvSeq[peer] + 1
	if err := s.recvChunkAt(peer, c, q, true); err != nil {
		return err
	}
	s.p2p.recvSeq[peer] = q
	return nil
}

// recvChunkAt enqueues chunk c of a receive from peer as the pair's chunk q; its
// stream waits for the sender's chunk if gpuWait (else the host has seen it there:
// devp2plane.go). s.mu held, context current.
func (s *Shared) recvChunkAt(peer int, c p2pChunk, q uint32, gpuWait bool) error {
	st := c.op.Stream
	if gpuWait && !fault("p2p-skip-sent-wait") {
		if err := s.d.StreamWaitValue32(st, s.p2pSentFlag(s.rank, peer), q); err != nil {
			return err
		}
	}
	src := s.p2pSlot(peer, s.rank, q)
	if peer != s.rank && fault("p2p-offset") {
		src-- // still inside the allocation: the flags page or the previous slot
	}
	if err := s.d.MemcpyDtoD(c.op.Buf+uintptr(c.off), src, c.n, st); err != nil {
		return err
	}
	if err := s.d.StreamWriteValue32(st, s.p2pRecvdFlag(peer, s.rank), q); err != nil {
		return err
	}
	return s.d.StreamWriteValue32(st, s.p2pDoneFlag(s.rank, peer), q)
}

// Follow makes stream side wait for the work enqueued on stream main so far (an
// event recorded on main), both streams of the scratch's context.
func (s *Shared) Follow(side, main Stream) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.d.Do(s.ctx, func() error { return s.followLocked(side, main) })
}

// followLocked is Follow with s.mu held and the context current.
func (s *Shared) followLocked(side, main Stream) error {
	// The fake driver, like a careful reading of CUDA's, wants an event alive until
	// its record has run: destroy the ones that have completed, keep the rest.
	keep := s.p2p.forks[:0]
	for _, ev := range s.p2p.forks {
		if done, err := s.d.EventDone(ev); err == nil && done {
			_ = s.d.EventDestroy(ev)
		} else {
			keep = append(keep, ev)
		}
	}
	s.p2p.forks = keep
	ev, err := s.d.EventCreate()
	if err != nil {
		return err
	}
	s.p2p.forks = append(s.p2p.forks, ev)
	if err := s.d.EventRecord(ev, main); err != nil {
		return err
	}
	return s.d.StreamWaitEvent(side, ev)
}

// p2pRelease destroys Follow's events (release, with the context current): once
// Close has seen every rank's point-to-point work done, they have run.
func (s *Shared) p2pRelease() error {
	var errs []error
	for _, ev := range s.p2p.forks {
		errs = append(errs, s.d.EventDestroy(ev))
	}
	s.p2p.forks = nil
	return errors.Join(errs...)
}

// p2pQuiesce enqueues, on the legacy default stream, waits until every chunk this
// rank sent has been copied out by its receiver and every chunk it received has
// been copied out of the sender's slot (Close, before the scratch is freed and the
// peers' unmapped), all on flags of this rank's page: a released scratch never gets
// here (Close leaves it mapped), and releaseP2P satisfies these waits too. s.mu held,
// context current.
func (s *Shared) p2pQuiesce() error {
	if s.p2p.sendSeq == nil {
		return nil
	}
	for p := range s.nranks {
		if q := s.p2p.sendSeq[p]; q > 0 {
			if err := s.d.StreamWaitValue32(StreamLegacy, s.p2pRecvdFlag(s.rank, p), q); err != nil {
				return err
			}
		}
		if q := s.p2p.recvSeq[p]; q > 0 {
			if err := s.d.StreamWaitValue32(StreamLegacy, s.p2pDoneFlag(s.rank, p), q); err != nil {
				return err
			}
		}
	}
	return nil
}
