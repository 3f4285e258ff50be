package cuda

import (
	"fmt"
	"strings"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// The failure watcher (devfault.go) for point-to-point: a group of sends and
// receives (P2P) is tracked as one pending operation per stream it uses, from an
// event recorded on the stream before the group's first chunk to one after its last,
// with the chunks each stream waits for (p2pWait). Every point-to-point wait is on a
// flag of the waiting rank's own page (devp2p.go), so a rank that gives up releases
// its streams by writing there (releaseP2P), and an operation on the GPU past the
// timeout is explained by reading that page: the peers that have not sent the chunks
// this rank waits for, or not received the ones it must wait for before it may send
// more.

// p2pWait is what a stream of a group waits for from one peer: the chunks of a
// receive from it, or of a send to it, up to chunk last.
type p2pWait struct {
	recv bool
	peer int
	last uint32
}

// p2pGroup is a group being enqueued: its start events and waits, per stream. P2P
// reuses one (p2pState.group); each stream's waits go to its pendingOp.
type p2pGroup struct {
	streams []Stream
	starts  []event
	waits   [][]p2pWait
}

// p2pBegin records a start event on every stream with chunks to enqueue. s.mu held,
// context current.
func (s *Shared) p2pBegin(queues [2][][]p2pChunk) (*p2pGroup, error) {
	g := &s.p2p.group
	g.streams, g.starts, g.waits = g.streams[:0], g.starts[:0], g.waits[:0]
	for _, byPeer := range queues {
		for _, q := range byPeer {
			for _, c := range q {
				if g.index(c.op.Stream) >= 0 {
					continue
				}
				ev, err := s.event()
				if err == nil {
					err = s.d.EventRecord(ev, c.op.Stream)
				}
				if err != nil {
					s.spare = append(s.spare, g.starts...) // Close destroys them
					if ev != 0 {
						s.spare = append(s.spare, ev)
					}
					return nil, err
				}
				g.streams, g.starts = append(g.streams, c.op.Stream), append(g.starts, ev)
				g.waits = append(g.waits, nil)
			}
		}
	}
	return g, nil
}

func (g *p2pGroup) index(st Stream) int {
	for i, x := range g.streams {
		if x == st {
			return i
		}
	}
	return -1
}

// note records that stream st has been given chunk sendSeq of the sends to peer
// (recv false) or chunk recvSeq of the receives from it.
func (g *p2pGroup) note(st Stream, recv bool, peer int, sendSeq, recvSeq uint32) {
	i := g.index(st)
	q := sendSeq
	if recv {
		q = recvSeq
	}
	for j := range g.waits[i] {
		if w := &g.waits[i][j]; w.recv == recv && w.peer == peer {
			w.last = q
			return
		}
	}
	g.waits[i] = append(g.waits[i], p2pWait{recv: recv, peer: peer, last: q})
}

// p2pTrack records an end event on each of the group's streams and adds the group
// to the pending operations, one per stream. s.mu held, context current.
func (s *Shared) p2pTrack(g *p2pGroup) error {
	for i, st := range g.streams {
		ev, err := s.event()
		if err == nil {
			err = s.d.EventRecord(ev, st)
		}
		if err != nil {
			s.spare = append(s.spare, g.starts[i:]...) // untracked: Close destroys them
			if ev != 0 {
				s.spare = append(s.spare, ev)
			}
			return err
		}
		s.ops = append(s.ops, pendingOp{start: g.starts[i], end: ev, p2p: g.waits[i]})
	}
	if s.watch != nil && len(g.streams) > 0 {
		select {
		case s.watch.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// p2pName names a point-to-point operation for an error.
func p2pName(waits []p2pWait) string {
	var to, from []string
	for _, w := range waits {
		if w.recv {
			from = append(from, fmt.Sprint(w.peer))
		} else {
			to = append(to, fmt.Sprint(w.peer))
		}
	}
	var parts []string
	if len(to) > 0 {
		parts = append(parts, "send to rank "+strings.Join(to, ", "))
	}
	if len(from) > 0 {
		parts = append(parts, "receive from rank "+strings.Join(from, ", "))
	}
	return strings.Join(parts, "; ")
}

// judgeP2P is judge for a stream's part of a point-to-point group: an error once it
// has been on the GPU longer than the timeout, naming the peers it waits for.
func (s *Shared) judgeP2P(w *watch, op pendingOp) error {
	if op.started.IsZero() {
		return nil
	}
	age, timeout := time.Since(op.started), w.cfg.Timeout()
	if age < timeout {
		return nil
	}
	flags, rerr := s.loadOwn(s.hdr, p2pFlagsBytes(s.nranks)), error(nil)
	if done, err := s.finished(op); done || err != nil {
		return err
	}
	var why string
	if rerr != nil {
		why = fmt.Sprintf("the flags could not be read: %v", rerr)
	} else {
		why = strings.Join(s.p2pLag(op.p2p, flags), "; ")
	}
	if why == "" {
		why = "every peer has done its part: this rank's own stream has not (is other work on it waiting?)"
	}
	return fmt.Errorf("%w: rank %d: device-path point-to-point (%s) has been on the GPU for %v, beyond the communicator's timeout (%v): %s",
		transport.ErrTimeout, s.rank, p2pName(op.p2p), age.Round(time.Millisecond), timeout, why)
}

// p2pLag says, from this rank's point-to-point flags, which peers have not done what
// waits need: sent the chunks a receive waits for, or received enough of this rank's
// chunks for a send's last to go into its slot.
func (s *Shared) p2pLag(waits []p2pWait, flags []uint32) []string {
	word := func(addr uintptr) uint32 { return flags[(addr-s.p2pFlagBase(s.rank))/4] }
	var lag []string
	for _, w := range waits {
		if w.recv {
			if sent := word(s.p2pSentFlag(s.rank, w.peer)); int32(sent-w.last) < 0 {
				lag = append(lag, fmt.Sprintf("rank %d has not sent chunk %d of its messages to this rank (it has sent %d)", w.peer, sent+1, sent))
			}
			continue
		}
		if got := word(s.p2pRecvdFlag(s.rank, w.peer)); w.last > p2pSlots && int32(got-(w.last-p2pSlots)) < 0 {
			lag = append(lag, fmt.Sprintf("rank %d has not received chunk %d of this rank's messages to it (it has received %d)", w.peer, got+1, got))
		}
	}
	return lag
}

// releaseP2P writes, from the host, the values that satisfy every point-to-point wait
// this rank's streams can have queued (releaseStreams). s.mu held.
func (s *Shared) releaseP2P() {
	if s.p2p.sendSeq == nil {
		return
	}
	for p := range s.nranks {
		s.storeOwn(s.p2pSentFlag(s.rank, p), s.p2p.recvSeq[p]+1<<30)
		s.storeOwn(s.p2pRecvdFlag(s.rank, p), s.p2p.sendSeq[p]+1<<30)
		s.storeOwn(s.p2pDoneFlag(s.rank, p), s.p2p.recvSeq[p]+1<<30)
	}
}
