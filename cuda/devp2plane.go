package cuda

import (
	"fmt"
	"sync/atomic"
	"time"
)

// Host-progressed point-to-point: goncclSendAsync/goncclRecvAsync on the device path.
//
// A send or receive that P2P enqueues waits on the GPU (cuStreamWaitValue32) for its
// peer's flags. That is right on the caller's stream, in issue order, as NCCL's are.
// It is wrong for the async operations, which promise to progress whatever the order
// of the calls (every rank may receive first): they run on streams of the
// communicator's own, but a context's streams share CUDA_DEVICE_MAX_CONNECTIONS
// hardware queues (8 by default, 1 in Megatron-style training), and a wait at the head
// of a queue holds back everything queued behind it there. At one queue, a receive
// waiting for its sender would hold back this rank's own send, which its peer's
// receive waits for: both ranks stuck for good.
//
// So an async operation never waits on the GPU for another rank. Its chunk numbers
// are taken when it is issued (the pair's operations still match in issue order), and
// a lane (one per peer and direction, on its side stream) enqueues its chunks from a
// goroutine, each only once the host has seen, in this rank's flag page (host memory:
// hostflags.go), that what the chunk would wait for has happened: for a receive, the
// sender's "sent" count; for a send, the receiver's "received" count of the chunk that
// last used the slot. A stream holding a lane's chunk then never waits, and a chunk
// enqueued later sits behind nothing that depends on this rank's later work. The
// lane's operations are enqueued in issue order, one after the other.
//
// A lane waits at most the communicator's timeout for one chunk, and gives up at once
// when the communicator has failed (a lost peer) or the device path has (Abort, the
// watcher): the error names the peer, and the device path is given up, as the pair's
// chunk counts no longer agree.

// laneKey names a lane: the async sends to peer, or the receives from it.
type laneKey struct {
	peer int
	recv bool
}

// lane is the host's queue of the async operations of one peer and direction.
type lane struct {
	ops     []*laneOp // in issue order; the head is being enqueued
	running bool      // a goroutine is enqueueing its ops
	idle    chan struct{}
	stream  Stream // the stream of its latest op
}

// laneOp is one async operation: its chunks, numbered from first.
type laneOp struct {
	op     P2POp
	chunks []p2pChunk
	first  uint32
	done   func(error) // told once its last chunk is enqueued, or why it never will be
}

// LaneTimeout is how long a lane waits for one chunk's peer when the scratch has no
// watcher (whose WatchConfig.Timeout applies otherwise).
var LaneTimeout = 5 * time.Minute

// P2PLater issues op asynchronously: its chunk numbers are taken now, in issue order
// with the pair's other operations, and its chunks are enqueued on op.Stream later,
// from a goroutine, each once its peer has got far enough (see above); done is told
// once the last is enqueued (record a completion event then), or with why it will not
// be. Work on op.Stream before the call (a Follow) comes first. An error return means
// nothing was issued and done will not be called.
func (s *Shared) P2PLater(op P2POp, done func(error)) error {
	if op.Peer < 0 || op.Peer >= s.nranks {
		return fmt.Errorf("cuda: peer %d is not a rank of a communicator of %d", op.Peer, s.nranks)
	}
	if op.Bytes < 0 {
		return fmt.Errorf("cuda: a point-to-point message of %d bytes", op.Bytes)
	}
	sb := p2pSlotBytes(s.cap, s.nranks)
	lo := &laneOp{op: op, done: done}
	for off := 0; off < op.Bytes; off += sb {
		lo.chunks = append(lo.chunks, p2pChunk{op: &lo.op, off: off, n: min(sb, op.Bytes-off)})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usableLocked(); err != nil {
		return err
	}
	if s.p2p.sendSeq == nil {
		s.p2p.sendSeq = make([]uint32, s.nranks)
		s.p2p.recvSeq = make([]uint32, s.nranks)
	}
	seq := &s.p2p.sendSeq[op.Peer]
	if op.Recv {
		seq = &s.p2p.recvSeq[op.Peer]
	}
	lo.first = *seq + 1
	*seq += uint32(len(lo.chunks))
	if len(lo.chunks) == 0 {
		go done(nil)
		return nil
	}
	if s.p2p.lanes == nil {
		s.p2p.lanes = map[laneKey]*lane{}
	}
	k := laneKey{op.Peer, op.Recv}
	l := s.p2p.lanes[k]
	if l == nil {
		l = &lane{}
		s.p2p.lanes[k] = l
	}
	l.ops = append(l.ops, lo)
	l.stream = op.Stream
	if !l.running {
		l.running, l.idle = true, make(chan struct{})
		go s.runLane(k, l)
	}
	return nil
}

// usableLocked says why the scratch takes no more work, if it does not. s.mu held.
func (s *Shared) usableLocked() error {
	switch {
	case s.failed != nil:
		return fmt.Errorf("cuda: the communicator's device scratch was released after %w", s.failed)
	case s.closed:
		return fmt.Errorf("cuda: the communicator's device scratch is closed")
	}
	return nil
}

// runLane enqueues the lane's operations in order until it is empty. On an error the
// operations still queued fail with it.
func (s *Shared) runLane(k laneKey, l *lane) {
	for {
		s.mu.Lock()
		if len(l.ops) == 0 {
			l.running = false
			close(l.idle)
			s.mu.Unlock()
			return
		}
		o := l.ops[0]
		s.mu.Unlock()
		err := s.runLaneOp(k, o)
		o.done(err)
		s.mu.Lock()
		l.ops = l.ops[1:]
		var rest []*laneOp
		if err != nil {
			rest, l.ops = l.ops, nil
		}
		s.mu.Unlock()
		for _, r := range rest {
			r.done(err)
		}
	}
}

// runLaneOp enqueues o's chunks, each once the host has seen its wait met.
func (s *Shared) runLaneOp(k laneKey, o *laneOp) error {
	for i, c := range o.chunks {
		q := o.first + uint32(i)
		if err := s.laneWait(k, q, i, len(o.chunks)); err != nil {
			s.laneFailed(err)
			return err
		}
		s.mu.Lock()
		err := s.usableLocked()
		if err == nil {
			err = s.d.Do(s.ctx, func() error {
				if k.recv {
					return s.recvChunkAt(k.peer, c, q, false)
				}
				return s.sendChunkAt(k.peer, c, q, false)
			})
		}
		s.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// laneWait waits, on the host, until chunk q of lane k may be enqueued without its
// stream waiting: for a receive, the peer has put it in its slot; for a send, the
// peer has copied out the chunk that last used its slot.
func (s *Shared) laneWait(k laneKey, q uint32, i, n int) error {
	var flag uintptr
	want := q
	switch {
	case k.recv && !fault("p2p-skip-sent-wait"):
		flag = s.p2pSentFlag(s.rank, k.peer)
	case !k.recv && q > p2pSlots && !fault("p2p-skip-free-wait"):
		flag, want = s.p2pRecvdFlag(s.rank, k.peer), q-p2pSlots
	default:
		return nil
	}
	word := s.ownWord(flag)
	timeout, commErr := s.laneLimits()
	deadline := time.Now().Add(timeout)
	var w waiter
	for atomic.LoadUint32(word) < want {
		s.mu.Lock()
		err := s.usableLocked()
		s.mu.Unlock()
		if err != nil {
			return err
		}
		if err := commErr(); err != nil {
			return fmt.Errorf("cuda: async %s: %w", laneName(k, i, n), err)
		}
		if time.Now().After(deadline) {
			what := "put chunk %d in its slot"
			if !k.recv {
				what = "copied out chunk %d"
			}
			return fmt.Errorf("cuda: async %s waited beyond the communicator's timeout (%v): rank %d has not "+what,
				laneName(k, i, n), timeout, k.peer, want)
		}
		w.Wait()
	}
	return nil
}

// laneLimits returns how long a lane waits for one chunk's peer and the
// communicator's error (nil while it has not failed), from the watcher's configuration.
func (s *Shared) laneLimits() (time.Duration, func() error) {
	timeout, commErr := LaneTimeout, func() error { return nil }
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watch; w != nil {
		if w.cfg.Timeout != nil {
			timeout = w.cfg.Timeout()
		}
		if w.cfg.Err != nil {
			commErr = w.cfg.Err
		}
	}
	return timeout, commErr
}

// afterLanes orders a group that P2P enqueues after the async operations of the same
// peers and directions issued before it: the chunks of one pair are numbered in issue
// order, and two of them in flight on streams that do not order each other could
// publish their counts out of order (a receiver would then read a slot not yet
// written). It waits, on the host, until those lanes have enqueued their operations,
// and returns, per stream of the group, the lane streams it must follow (Follow). s.mu
// not held.
func (s *Shared) afterLanes(ops []P2POp) (map[Stream][]Stream, error) {
	timeout, _ := s.laneLimits()
	deadline := time.Now().Add(timeout)
	var follow map[Stream][]Stream
	for _, op := range ops {
		k := laneKey{op.Peer, op.Recv}
		s.mu.Lock()
		l := s.p2p.lanes[k]
		var idle chan struct{}
		if l != nil && l.running {
			idle = l.idle
		}
		s.mu.Unlock()
		if l == nil {
			continue
		}
		if idle != nil {
			t := time.NewTimer(time.Until(deadline))
			select {
			case <-idle:
				t.Stop()
			case <-t.C:
				return nil, fmt.Errorf("cuda: the async %s issued before this one were not enqueued in time (is rank %d progressing?)",
					map[bool]string{false: fmt.Sprintf("sends to rank %d", op.Peer), true: fmt.Sprintf("receives from rank %d", op.Peer)}[op.Recv], op.Peer)
			}
		}
		s.mu.Lock()
		ls := l.stream
		s.mu.Unlock()
		if ls != op.Stream {
			if follow == nil {
				follow = map[Stream][]Stream{}
			}
			follow[op.Stream] = append(follow[op.Stream], ls)
		}
	}
	return follow, nil
}

// laneName describes chunk i of n of an operation of lane k.
func laneName(k laneKey, i, n int) string {
	if k.recv {
		return fmt.Sprintf("receive from rank %d (chunk %d of %d)", k.peer, i+1, n)
	}
	return fmt.Sprintf("send to rank %d (chunk %d of %d)", k.peer, i+1, n)
}

// laneFailed gives up on the device path after a lane could not go on: its pair's
// chunk counts no longer agree. The communicator is told as the watcher tells it.
func (s *Shared) laneFailed(err error) {
	s.mu.Lock()
	w := s.watch
	s.mu.Unlock()
	s.giveUp(w, err)
}

// drainLanes waits, until deadline, for every lane to have enqueued its operations
// (Close, before it waits on the flags the lanes' chunks write). s.mu not held.
func (s *Shared) drainLanes(deadline time.Time) error {
	for {
		s.mu.Lock()
		var idle chan struct{}
		for _, l := range s.p2p.lanes {
			if l.running {
				idle = l.idle
				break
			}
		}
		s.mu.Unlock()
		if idle == nil {
			return nil
		}
		t := time.NewTimer(time.Until(deadline))
		select {
		case <-idle:
			t.Stop()
		case <-t.C:
			return fmt.Errorf("the async point-to-point operations were not all enqueued in time")
		}
	}
}
