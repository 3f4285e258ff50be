package core

import (
	"fmt"

	"github.com/gonccl/gonccl/transport"
)

// How point-to-point operations end without their message: a timeout, a lost peer,
// the engine closing.

func (e *p2pEngine) expireRecv(r *p2pRecv) {
	e.mu.Lock()
	switch r.state {
	case recvPosted:
		for i, q := range e.posted {
			if q == r {
				e.posted = append(e.posted[:i], e.posted[i+1:]...)
				break
			}
		}
	case recvRdv:
		delete(e.peers[r.from].rdv, r.seq)
	default: // being filled (bounded by the read deadline) or finished
		e.mu.Unlock()
		return
	}
	r.state = recvDone
	e.mu.Unlock()
	waiting := fmt.Sprintf("waiting for rank %d", r.from)
	hint := fmt.Sprintf("is rank %d alive, and did it send with this tag and size?", r.from)
	if r.src == AnySource && r.seq == 0 {
		waiting, hint = "waiting for a sender", "did any rank send with this tag?"
	}
	r.req.complete(&OpError{Rank: e.rank, Op: r.what, Peer: r.src, Err: &timeoutError{after: r.timeout, waiting: waiting, hint: hint}})
}

func (e *p2pEngine) expireSend(s *p2pSend) {
	e.mu.Lock()
	pp := e.peers[s.peer]
	switch s.state {
	case sendQueued:
		unqueue(pp, s.frame)
		if s.frame.h.Kind == transport.MsgData {
			e.control(pp, transport.MsgCancel, s.seq, 0)
		}
		delete(pp.waitCTS, s.seq)
	case sendWaitCTS:
		delete(pp.waitCTS, s.seq)
		pp.withdrawn[s.seq] = true
	default: // being written (bounded by the write deadline) or finished
		e.mu.Unlock()
		return
	}
	s.state = sendDone
	e.mu.Unlock()
	s.req.complete(s.timeoutErr(e.rank))
}

// timeoutErr is the error of a send that timed out.
func (s *p2pSend) timeoutErr(rank int) error {
	return &OpError{Rank: rank, Op: s.what, Peer: s.peer, Err: &timeoutError{after: s.timeout,
		waiting: fmt.Sprintf("waiting for rank %d", s.peer), hint: fmt.Sprintf("is rank %d alive, and did it post the matching receive?", s.peer)}}
}

// expireUnwritten ends s, whose frame of kind the writer took out of the queue with
// its deadline passed and nothing of it written, as expireSend ends a queued one: a
// data frame's receiver, told to expect it, is told it will not come. mu held.
func (e *p2pEngine) expireUnwritten(pp *p2pPeer, s *p2pSend, kind transport.MsgKind) {
	switch kind {
	case transport.MsgData:
		e.control(pp, transport.MsgCancel, s.seq, 0)
	case transport.MsgRTS:
		delete(pp.waitCTS, s.seq)
	}
	s.state = sendDone
}

// failPeer shuts pp's channel down after err and fails everything pending on it;
// it reports whether this was the first failure of pp (false: it had failed already).
// Receives from AnySource stay posted: another rank may still satisfy them.
// Unexpected eager messages already read from pp stay deliverable.
func (e *p2pEngine) failPeer(pp *p2pPeer, err error) bool {
	e.mu.Lock()
	if pp.err != nil {
		e.mu.Unlock()
		return false
	}
	pp.err = lostRankError(pp.rank, err)
	if e.leaving != nil { // this rank is closing: the peer hung up because it said goodbye
		pp.err = e.leaving
	}
	done := e.drainPeer(pp, pp.err)
	closed := e.closed != nil
	if e.statusAnswers != nil { // a status query waits for this peer: it will not answer
		select {
		case e.statusAnswers <- statusAnswer{from: pp.rank, err: err}:
		default:
		}
	}
	e.mu.Unlock()
	pp.conn.Close()
	if e.onEnded != nil {
		e.onEnded()
	}
	if len(done) > 0 && !closed {
		e.log.Warn(fmt.Sprintf("point-to-point channel to rank %d failed with %d operations pending: %v",
			pp.rank, len(done), err))
	}
	done.run()
	return true
}

// ended reports whether the channel to r has failed or closed (false where there is
// none).
func (e *p2pEngine) ended(r int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	pp := e.peers[r]
	return pp != nil && pp.err != nil
}

// drainPeer collects every request pending on pp, to fail with err. mu held.
func (e *p2pEngine) drainPeer(pp *p2pPeer, err error) completions {
	var done completions
	failR := func(r *p2pRecv) {
		if r.state != recvDone {
			r.state = recvDone
			done = append(done, completion{r.req, r.timer, &OpError{Rank: e.rank, Op: r.what, Peer: pp.rank, Err: err}})
		}
	}
	failS := func(s *p2pSend) {
		if s.state != sendDone {
			s.state = sendDone
			done = append(done, completion{s.req, s.timer, &OpError{Rank: e.rank, Op: s.what, Peer: pp.rank, Err: err}})
		}
	}
	kept := e.posted[:0]
	for _, r := range e.posted {
		if r.src == pp.rank {
			failR(r)
		} else {
			kept = append(kept, r)
		}
	}
	e.posted = kept
	unexp := e.unexpected[:0]
	for _, u := range e.unexpected {
		if u.from != pp.rank || u.h.Kind == transport.MsgEager {
			unexp = append(unexp, u)
		}
	}
	e.unexpected = unexp
	for _, r := range pp.rdv {
		failR(r)
	}
	if pp.reading != nil {
		failR(pp.reading)
	}
	for _, f := range pp.data {
		if f.send != nil {
			failS(f.send)
		}
	}
	for _, s := range pp.waitCTS {
		failS(s)
	}
	if pp.writing != nil {
		failS(pp.writing)
	}
	for _, q := range [][]*p2pFrame{pp.ctrl, pp.data} {
		for _, f := range q {
			if f.written != nil { // a goodbye that will never go out: sayBye stops waiting for it
				close(f.written)
			}
		}
	}
	pp.rdv, pp.waitCTS, pp.ctrl, pp.data = map[uint64]*p2pRecv{}, map[uint64]*p2pSend{}, nil, nil
	pp.reading, pp.writing = nil, nil
	pp.wake.Broadcast()
	return done
}

// close fails every pending point-to-point request with err, closes the channels and
// waits for their goroutines, so that no buffer is touched after it returns.
func (e *p2pEngine) close(err error, reason string) {
	e.mu.Lock()
	if e.leaving == nil {
		e.leaving = err
	}
	e.mu.Unlock()
	e.sayBye(reason)
	e.mu.Lock()
	if e.closed != nil {
		e.mu.Unlock()
		e.wg.Wait()
		return
	}
	e.closed = err
	close(e.stop)
	var done completions
	for _, pp := range e.peers {
		if pp != nil && pp.err == nil {
			pp.err = err
			done = append(done, e.drainPeer(pp, err)...)
		}
	}
	for _, r := range e.posted {
		r.state = recvDone
		done = append(done, completion{r.req, r.timer, &OpError{Rank: e.rank, Op: r.what, Peer: r.src, Err: err}})
	}
	e.posted, e.unexpected = nil, nil
	e.mu.Unlock()
	for _, pp := range e.peers {
		if pp != nil {
			pp.conn.Close()
		}
	}
	done.run()
	e.wg.Wait()
}
