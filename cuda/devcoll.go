package cuda

import (
	"errors"
	"fmt"

	"github.com/gonccl/gonccl/internal/reduce"
)

// The device path: collectives among the ranks of one host whose bytes stay on the
// GPU. Go plans each step and enqueues it on the caller's stream: device-to-device
// copies into and out of the shared scratch (Shared), reduction kernels (Kernels),
// and the flags that order the ranks (stream memory operations). Nothing waits on the
// host: a call returns once its work is enqueued.
//
// The algorithm is direct (one-shot) over the shared scratch, one round per chunk of
// at most Cap bytes per rank:
//
//	wait every rank's readDone >= n-1   (they have read what they needed of round n-1)
//	copy the input into the own data area
//	[first round of an operation: write its descriptor (devdesc.go)]; write ready = n
//	wait every rank's ready >= n
//	[first round: wait until every rank's descriptor equals the own]
//	reduce the own share of the elements, reading every rank's data area;
//	   write reduced = n; wait every rank's reduced >= n       (reducing collectives)
//	copy each rank's share (or data, for all_gather/broadcast) to the output
//	write readDone = n
//
// Each rank reads every other's scratch once per round: right for the 2-8 ranks of a
// host and for small and medium messages. A large all_reduce among three or more
// ranks can run the ring instead (devring.go, AllReduceRing): the same bytes per rank,
// each over the link to one neighbour; the caller chooses (internal/devroute, by
// route.DeviceRing).
//
// "Write a flag" writes it into every rank's header (post), "wait for rank p's flag"
// reads p's slot of the own header (wait, waitAll): so a rank releases only its own
// streams when it gives up (devfault.go). The round helpers, for a new device
// operation: run (or runOp with a descriptor) around the rounds; begin for each round;
// post, wait, waitAll, waitReady (every rank's ready, and the descriptor check in the
// first round) and check (the descriptor check alone) inside it.

// round is one round of a device collective on stream st. Call with s.mu held and the
// context current.
type round struct {
	s       *Shared
	st      Stream
	n       uint32
	newSide bool    // the previous round ran on another stream
	desc    *opDesc // the operation's descriptor, in its first round (runOp); else nil
}

// begin starts the next round on st: it waits until every rank has read what it
// needed of the previous round.
func (s *Shared) begin(st Stream) (round, error) {
	if s.closed {
		if s.failed != nil {
			return round{}, fmt.Errorf("cuda: the communicator's device scratch was released after %w", s.failed)
		}
		return round{}, fmt.Errorf("cuda: the communicator's device scratch is closed")
	}
	s.step++
	r := round{s: s, st: st, n: s.step, newSide: s.lastStream != st}
	if s.step == s.curFirst {
		r.desc = s.cur
		if err := s.trackStart(st); err != nil {
			return r, err
		}
	}
	s.lastStream = st
	return r, r.waitAll(flagReadDone, r.n-1)
}

// waitReady waits for every rank's ready flag of this round and, in an operation's
// first round, for their descriptors to agree with this rank's.
func (r round) waitReady() error {
	if r.desc != nil {
		return r.agree(*r.desc)
	}
	return r.waitAll(flagReady, r.n)
}

// check is waitReady in an operation's first round, for the collectives whose ranks
// do not all wait for each other: they must still agree. Later rounds: nothing.
func (r round) check() error {
	if r.desc != nil {
		return r.agree(*r.desc)
	}
	return nil
}

// waitAll waits for every rank's flag to reach v. This rank's own flags were written
// on this stream, in order, except a readDone of a round that ran on another stream.
func (r round) waitAll(flag int, v uint32) error {
	for p := range r.s.nranks {
		if p == r.s.rank && !(flag == flagReadDone && r.newSide) {
			continue
		}
		if err := r.wait(p, flag, v); err != nil {
			return err
		}
	}
	return nil
}

// wait waits, on the round's stream, for rank p's flag to reach v (in this rank's
// header).
func (r round) wait(p, flag int, v uint32) error {
	if flag == flagReady && fault("skip-ready-wait") {
		return nil
	}
	return r.s.d.StreamWaitValue32(r.st, r.s.flag(p, flag), v)
}

// post writes this round's number into this rank's flag, in every rank's header, its
// own first (the watcher relies on it: devfault.go). An operation's first ready flag
// is preceded by its descriptor (devdesc.go).
func (r round) post(flag int) error {
	if flag == flagReady && r.desc != nil {
		if err := r.publish(*r.desc); err != nil {
			return err
		}
	}
	for i := range r.s.nranks {
		q := (r.s.rank + i) % r.s.nranks
		if err := r.s.d.StreamWriteValue32(r.st, r.s.inbox(q, r.s.rank, flag), r.n); err != nil {
			return err
		}
	}
	return nil
}

func (r round) copy(dst, src uintptr, n int) error { return r.s.d.MemcpyDtoD(dst, src, n, r.st) }

// peerData is where rank p's data area is read from (one element early under the
// "offset" fault, still inside the allocation).
func (r round) peerData(p, es int) uintptr {
	if p != r.s.rank && fault("offset") {
		return r.s.data(p) - uintptr(es)
	}
	return r.s.data(p)
}

// run runs f with the scratch locked and the context current; an error in the middle
// of a round leaves the peers waiting for flags that never come, so the scratch is
// then closed to further device work (the communicator should be aborted). The
// operation's rounds are tracked until the GPU has run them (devfault.go), so that the
// watcher can release them.
func (s *Shared) run(f func() error) error { return s.runOp(nil, f) }

// runOp is run for a collective described by d, whose first round checks that the
// ranks agree on it.
func (s *Shared) runOp(d *opDesc, f func() error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d != nil {
		if err := d.check(); err != nil {
			return err
		}
	}
	first := s.step + 1
	s.cur, s.curFirst = d, first
	err := s.d.Do(s.ctx, func() error {
		err := f()
		if s.step != first-1 { // rounds were begun
			err = errors.Join(err, s.track(d, first))
		}
		return err
	})
	s.cur = nil
	if err != nil {
		s.closed = true
	}
	return err
}

// share returns rank r's share [lo, hi) of count elements.
func share(count, r, nranks int) (int, int) {
	return count * r / nranks, count * (r + 1) / nranks
}

// rounds enqueues an operation of total units (bytes or elements) in rounds of at most
// per: each round begins (the peers have read what they needed of the previous one),
// runs body on units [off, off+n), and says it has read what it needed.
func (s *Shared) rounds(st Stream, total, per int, body func(r round, off, n int) error) error {
	for off := 0; off < total; off += per {
		r, err := s.begin(st)
		if err != nil {
			return err
		}
		if err := body(r, off, min(per, total-off)); err != nil {
			return err
		}
		if err := r.post(flagReadDone); err != nil {
			return err
		}
	}
	return nil
}

// input copies n bytes from src into the own data area and says the round's
// input is there (its ready flag).
func (r round) input(src uintptr, n int) error {
	if err := r.copy(r.s.data(r.s.rank), src, n); err != nil {
		return err
	}
	return r.post(flagReady)
}

// AllGather enqueues on st: recv[r*bytes:(r+1)*bytes] = rank r's send, for every rank.
func (s *Shared) AllGather(st Stream, send, recv uintptr, bytes int) error {
	return s.gather(st, kindAllGather, send, recv, bytes, -1)
}

// Gather enqueues on st: block p (bytes) of root's recv = rank p's send.
func (s *Shared) Gather(st Stream, send, recv uintptr, bytes, root int) error {
	return s.gather(st, kindGather, send, recv, bytes, root)
}

// gather is AllGather (root < 0) and Gather: every rank publishes its input, and the
// ranks that receive copy every rank's.
func (s *Shared) gather(st Stream, kind opKind, send, recv uintptr, bytes, root int) error {
	d := byteDesc(kind, bytes, root)
	return s.runOp(&d, func() error {
		return s.rounds(st, bytes, s.cap, func(r round, off, n int) error {
			if err := r.input(send+uintptr(off), n); err != nil {
				return err
			}
			if root >= 0 && s.rank != root {
				return r.check() // the first round: every rank agrees
			}
			if err := r.waitReady(); err != nil {
				return err
			}
			for p := range s.nranks {
				if err := r.copy(recv+uintptr(p*bytes+off), r.peerData(p, 1), n); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Broadcast enqueues on st: recv = root's send, on every rank.
func (s *Shared) Broadcast(st Stream, send, recv uintptr, bytes, root int) error {
	d := byteDesc(kindBroadcast, bytes, root)
	return s.runOp(&d, func() error {
		return s.rounds(st, bytes, s.cap, func(r round, off, n int) error {
			if s.rank == root {
				if err := r.copy(s.data(root), send+uintptr(off), n); err != nil {
					return err
				}
				if send != recv {
					if err := r.copy(recv+uintptr(off), send+uintptr(off), n); err != nil {
						return err
					}
				}
			}
			if err := r.post(flagReady); err != nil {
				return err
			}
			if err := r.check(); err != nil { // the first round: every rank agrees
				return err
			}
			if s.rank == root {
				return nil
			}
			if err := r.wait(root, flagReady, r.n); err != nil {
				return err
			}
			return r.copy(recv+uintptr(off), r.peerData(root, 1), n)
		})
	})
}

// AllReduce enqueues on st: recv = the element-wise reduction by op of every rank's
// send (count elements of dt). Avg sums, then divides by the number of ranks.
// root >= 0 makes it a reduce: only root's recv is written.
func (s *Shared) AllReduce(st Stream, k Reducer, send, recv uintptr, count int, dt reduce.DataType, op reduce.RedOp) error {
	return s.allReduce(st, k, send, recv, count, dt, op, -1)
}

// Reduce enqueues on st: root's recv = the reduction of every rank's send.
func (s *Shared) Reduce(st Stream, k Reducer, send, recv uintptr, count int, dt reduce.DataType, op reduce.RedOp, root int) error {
	return s.allReduce(st, k, send, recv, count, dt, op, root)
}

func (s *Shared) allReduce(st Stream, k Reducer, send, recv uintptr, count int, dt reduce.DataType, op reduce.RedOp, root int) error {
	es := dt.Size()
	per := s.cap / es
	kind := kindAllReduce
	if root >= 0 {
		kind = kindReduce
	}
	d := reduceDesc(kind, count, dt, op, root)
	return s.runOp(&d, func() error {
		return s.rounds(st, count, per, func(r round, first, c int) error {
			off := uintptr(first * es)
			if err := r.input(send+off, c*es); err != nil {
				return err
			}
			if err := r.waitReady(); err != nil {
				return err
			}
			// Reduce the own share into the own data area, the ranks in order.
			lo, hi := share(c, s.rank, s.nranks)
			if hi > lo {
				mine := s.data(s.rank) + uintptr(lo*es)
				for p := range s.nranks {
					if p == s.rank {
						continue
					}
					if err := k.ReduceIntoUnless(st, mine, r.peerData(p, es)+uintptr(lo*es), hi-lo, dt, op, s.abortWord()); err != nil {
						return err
					}
				}
				if op == reduce.Avg {
					if err := k.DivideBy(st, mine, hi-lo, dt, s.nranks); err != nil {
						return err
					}
				}
			}
			if err := r.post(flagReduced); err != nil {
				return err
			}
			if root >= 0 && root != s.rank {
				return nil
			}
			if err := r.waitAll(flagReduced, r.n); err != nil {
				return err
			}
			for p := range s.nranks {
				plo, phi := share(c, p, s.nranks)
				if err := r.copy(recv+off+uintptr(plo*es), s.data(p)+uintptr(plo*es), (phi-plo)*es); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// ReduceScatter enqueues on st: recv (recvCount elements) = the reduction of block
// rank of every rank's send (nranks blocks of recvCount elements).
func (s *Shared) ReduceScatter(st Stream, k Reducer, send, recv uintptr, recvCount int, dt reduce.DataType, op reduce.RedOp) error {
	es := dt.Size()
	per := s.cap / (es * s.nranks) // elements of each block per round
	if per == 0 {
		return fmt.Errorf("cuda: the device scratch (%d bytes) is too small for %d ranks", s.cap, s.nranks)
	}
	d := reduceDesc(kindReduceScatter, recvCount, dt, op, -1)
	return s.runOp(&d, func() error {
		return s.rounds(st, recvCount, per, func(r round, first, c int) error {
			// The own data area holds block b's elements [first, first+c) at b*c.
			for b := range s.nranks {
				if err := r.copy(s.data(s.rank)+uintptr(b*c*es), send+uintptr((b*recvCount+first)*es), c*es); err != nil {
					return err
				}
			}
			if err := r.post(flagReady); err != nil {
				return err
			}
			if err := r.waitReady(); err != nil {
				return err
			}
			out := recv + uintptr(first*es)
			block := uintptr(s.rank * c * es)
			if err := r.copy(out, s.data(s.rank)+block, c*es); err != nil {
				return err
			}
			for p := range s.nranks {
				if p == s.rank {
					continue
				}
				if err := k.ReduceIntoUnless(st, out, r.peerData(p, es)+block, c, dt, op, s.abortWord()); err != nil {
					return err
				}
			}
			if op == reduce.Avg {
				return k.DivideBy(st, out, c, dt, s.nranks)
			}
			return nil
		})
	})
}

// blockRound is how many bytes of each of nranks blocks one round of the scratch
// holds (a multiple of 16), or an error if it holds none.
func (s *Shared) blockRound() (int, error) {
	per := (s.cap / s.nranks) &^ 15
	if per == 0 {
		return 0, fmt.Errorf("cuda: the device scratch (%d bytes) is too small for %d ranks", s.cap, s.nranks)
	}
	return per, nil
}

// AlltoAll enqueues on st: block p (blockBytes) of recv = block rank of rank p's send.
func (s *Shared) AlltoAll(st Stream, send, recv uintptr, blockBytes int) error {
	per, err := s.blockRound()
	if err != nil {
		return err
	}
	d := byteDesc(kindAlltoAll, blockBytes, -1)
	return s.runOp(&d, func() error {
		return s.rounds(st, blockBytes, per, func(r round, off, n int) error {
			// The own data area holds bytes [off, off+n) of block b at b*per.
			for b := range s.nranks {
				if err := r.copy(s.data(s.rank)+uintptr(b*per), send+uintptr(b*blockBytes+off), n); err != nil {
					return err
				}
			}
			if err := r.post(flagReady); err != nil {
				return err
			}
			if err := r.waitReady(); err != nil {
				return err
			}
			for p := range s.nranks {
				if err := r.copy(recv+uintptr(p*blockBytes+off), r.peerData(p, 1)+uintptr(s.rank*per), n); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// Scatter enqueues on st: every rank's recv = block rank (bytes) of root's send.
func (s *Shared) Scatter(st Stream, send, recv uintptr, bytes, root int) error {
	per, err := s.blockRound()
	if err != nil {
		return err
	}
	d := byteDesc(kindScatter, bytes, root)
	return s.runOp(&d, func() error {
		return s.rounds(st, bytes, per, func(r round, off, n int) error {
			if s.rank == root {
				for b := range s.nranks {
					if err := r.copy(s.data(root)+uintptr(b*per), send+uintptr(b*bytes+off), n); err != nil {
						return err
					}
				}
			}
			if err := r.post(flagReady); err != nil {
				return err
			}
			if err := r.check(); err != nil { // the first round: every rank agrees
				return err
			}
			if err := r.wait(root, flagReady, r.n); err != nil {
				return err
			}
			return r.copy(recv+uintptr(off), r.peerData(root, 1)+uintptr(s.rank*per), n)
		})
	})
}
