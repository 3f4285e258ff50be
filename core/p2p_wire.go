package core

import (
	"fmt"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// The per-peer goroutines of point-to-point messaging (see p2p.go): the writer
// sends queued frames, the reader reads incoming ones and handles each.

// writer writes pp's queued frames until the channel fails or closes.
func (e *p2pEngine) writer(pp *p2pPeer) {
	for {
		e.mu.Lock()
		for pp.err == nil && len(pp.ctrl) == 0 && len(pp.data) == 0 {
			pp.wake.Wait()
		}
		if pp.err != nil {
			e.mu.Unlock()
			return
		}
		var f *p2pFrame
		if len(pp.ctrl) > 0 {
			f, pp.ctrl = pp.ctrl[0], pp.ctrl[1:]
		} else {
			f, pp.data = pp.data[0], pp.data[1:]
		}
		f.queued = false
		s := f.send
		if s != nil && !f.deadline.IsZero() && !time.Now().Before(f.deadline) {
			// The send's deadline passed before a byte of it went out (or it was
			// issued with none left): it times out, the connection stays up.
			e.expireUnwritten(pp, s, f.h.Kind)
			e.mu.Unlock()
			completions{{s.req, s.timer, s.timeoutErr(e.rank)}}.run()
			continue
		}
		if s != nil {
			if f.h.Kind == transport.MsgRTS {
				s.state = sendWaitCTS
				s = nil
			} else {
				s.state = sendWriting
				pp.writing = s
			}
		}
		e.mu.Unlock()
		if f.h.Kind == transport.MsgBye && e.byeDelay > 0 {
			time.Sleep(e.byeDelay)
		}
		if f.h.Kind == transport.MsgLost && e.lostDelay > 0 {
			time.Sleep(e.lostDelay)
		}
		if err := pp.conn.Write(&f.h, f.payload, f.deadline); err != nil {
			e.failPeer(pp, err)
			if f.written != nil { // it will never go out: nothing is left to wait for
				close(f.written)
			}
			return
		}
		pp.lastSent.Store(time.Now().UnixNano())
		if f.written != nil {
			close(f.written)
		}
		if s != nil {
			e.mu.Lock()
			pp.writing = nil
			s.state = sendDone
			e.mu.Unlock()
			completions{{s.req, s.timer, nil}}.run()
		}
	}
}

// reader reads pp's frames and matches them until the channel fails or closes.
func (e *p2pEngine) reader(pp *p2pPeer) {
	for {
		h, err := pp.conn.ReadHeader()
		if err == nil {
			err = e.handle(pp, h)
		}
		if err != nil {
			// Only a failure that starts here reports a death: when the heartbeat (or
			// anything else) failed the peer first, its closing the connection is what
			// ended this read, and the cause is theirs to report.
			first := e.failPeer(pp, err)
			e.mu.Lock()
			closing := e.closed != nil || e.leaving != nil // it hung up on our goodbye
			e.mu.Unlock()
			if first && !closing && isDeath(err) && e.onDead != nil {
				e.onDead(pp.rank, err)
			}
			return
		}
	}
}

// handle processes one incoming frame. An error breaks the channel. Completions
// collected while e.mu is held run after it is released.
func (e *p2pEngine) handle(pp *p2pPeer, h transport.MsgHeader) error {
	var done completions
	defer func() { done.run() }()
	switch h.Kind {
	case transport.MsgEager, transport.MsgRTS:
		return e.handleMessage(pp, h, &done)
	case transport.MsgData:
		return e.handleData(pp, h, &done)
	case transport.MsgCTS:
		e.handleCTS(pp, h)
	case transport.MsgNack:
		e.handleNack(pp, h, &done)
	case transport.MsgCancel:
		e.handleCancel(pp, h, &done)
	case transport.MsgStatusQuery:
		e.answerStatus(pp)
	case transport.MsgStatus:
		return e.readStatus(pp, h)
	case transport.MsgBye:
		return e.readBye(pp, h)
	case transport.MsgHeartbeat: // its arrival is the point (see heartbeat.go)
	case transport.MsgLost:
		return e.readLost(pp, h)
	case transport.MsgFailed:
		return e.readFailed(pp, h)
	case transport.MsgDevSize:
		e.readDevSize(pp, h)
	case transport.MsgWinPut:
		return e.readWinPut(pp, h)
	case transport.MsgWinSignal:
		e.readWinSignal(pp, h)
	case transport.MsgRefused:
		return e.readRefused(pp, h)
	}
	return nil
}

// handleMessage takes a new message: an eager one (its payload follows) or the
// announcement (rts) of a large one. It goes to the oldest matching posted receive,
// else it waits as unexpected.
func (e *p2pEngine) handleMessage(pp *p2pPeer, h transport.MsgHeader, done *completions) error {
	if h.Seq <= pp.lastSeq {
		return fmt.Errorf("rank %d sent message #%d after #%d: the stream is out of step", pp.rank, h.Seq, pp.lastSeq)
	}
	pp.lastSeq = h.Seq
	if h.Kind == transport.MsgEager && h.Len > p2pEagerBytes {
		return fmt.Errorf("rank %d sent an eager message of %d bytes, above the %d-byte limit", pp.rank, h.Len, p2pEagerBytes)
	}
	e.mu.Lock()
	r := e.takePosted(pp.rank, h.Tag)
	if h.Kind == transport.MsgRTS {
		if r != nil {
			e.acceptRTS(r, h, done)
		} else {
			e.unexpected = append(e.unexpected, &p2pUnexpected{from: pp.rank, h: h})
		}
		e.mu.Unlock()
		return nil
	}
	if r == nil {
		e.mu.Unlock()
		return e.readUnexpected(pp, h, done)
	}
	if err := e.sizeCheck(r, h); err != nil {
		r.state = recvDone
		*done = append(*done, completion{r.req, r.timer, err})
		e.mu.Unlock()
		return pp.conn.Discard(h.Len, time.Now().Add(e.timeout))
	}
	return e.fill(pp, r, done)
}

// handleData reads the payload of a large message into the receive that sent cts for
// it, or drops it if that receive has timed out meanwhile.
func (e *p2pEngine) handleData(pp *p2pPeer, h transport.MsgHeader, done *completions) error {
	e.mu.Lock()
	r := pp.rdv[h.Seq]
	delete(pp.rdv, h.Seq)
	if r == nil { // the receive timed out meanwhile
		e.mu.Unlock()
		return pp.conn.Discard(h.Len, time.Now().Add(e.timeout))
	}
	if h.Len != uint64(len(r.buf)) {
		err := fmt.Errorf("rank %d sent %d bytes for message #%d, announced as %d", pp.rank, h.Len, h.Seq, len(r.buf))
		r.state = recvDone
		*done = append(*done, completion{r.req, r.timer, &OpError{Rank: e.rank, Op: r.what, Peer: pp.rank, Err: err}})
		e.mu.Unlock()
		return err
	}
	return e.fill(pp, r, done)
}

// handleCTS queues the payload of the large send the peer is now ready for, or, if
// that send was withdrawn (it timed out), tells the peer to cancel its receive.
func (e *p2pEngine) handleCTS(pp *p2pPeer, h transport.MsgHeader) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s := pp.waitCTS[h.Seq]; s != nil {
		delete(pp.waitCTS, h.Seq)
		s.state = sendQueued
		s.frame = &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgData, Seq: h.Seq, Len: uint64(len(s.buf))},
			payload: s.buf, send: s, deadline: s.deadline}
		e.enqueue(pp, s.frame, false)
	} else if pp.withdrawn[h.Seq] {
		delete(pp.withdrawn, h.Seq)
		e.control(pp, transport.MsgCancel, h.Seq, 0)
	}
}

// handleNack fails the large send whose matching receive expects another size.
func (e *p2pEngine) handleNack(pp *p2pPeer, h transport.MsgHeader, done *completions) {
	e.mu.Lock()
	s := pp.waitCTS[h.Seq]
	delete(pp.waitCTS, h.Seq)
	delete(pp.withdrawn, h.Seq)
	if s != nil {
		s.state = sendDone
		*done = append(*done, completion{s.req, s.timer, &OpError{Rank: e.rank, Op: s.what, Peer: pp.rank, Err: fmt.Errorf(
			"%w: rank %d's receive (tag %d) expects %d bytes but rank %d sent %d bytes",
			ErrMismatch, pp.rank, s.tag, h.Len, e.rank, len(s.buf))}})
	}
	e.mu.Unlock()
	if s == nil {
		e.log.Warn(fmt.Sprintf("rank %d rejected message #%d: its receive expected %d bytes, a different size from what this rank sent",
			pp.rank, h.Seq, h.Len))
	}
}

// handleCancel fails the receive whose matching large send timed out after cts.
func (e *p2pEngine) handleCancel(pp *p2pPeer, h transport.MsgHeader, done *completions) {
	e.mu.Lock()
	r := pp.rdv[h.Seq]
	delete(pp.rdv, h.Seq)
	if r != nil {
		r.state = recvDone
		*done = append(*done, completion{r.req, r.timer, &OpError{Rank: e.rank, Op: r.what, Peer: pp.rank,
			Err: fmt.Errorf("%w: rank %d's matching send timed out before it could deliver the data", ErrTimeout, pp.rank)}})
	}
	e.mu.Unlock()
}

// fill reads a message's payload straight into r's buffer. mu held on entry, released.
func (e *p2pEngine) fill(pp *p2pPeer, r *p2pRecv, done *completions) error {
	r.state = recvReading
	pp.reading = r
	e.mu.Unlock()
	if err := pp.conn.ReadPayload(r.buf, r.deadline); err != nil {
		return err
	}
	e.mu.Lock()
	pp.reading = nil
	r.state = recvDone
	e.mu.Unlock()
	*done = append(*done, completion{r.req, r.timer, nil})
	return nil
}

// readUnexpected reads an eager message no receive was posted for, then matches it
// again (a receive may have been posted while it was read) or keeps it.
func (e *p2pEngine) readUnexpected(pp *p2pPeer, h transport.MsgHeader, done *completions) error {
	payload := make([]byte, h.Len)
	if err := pp.conn.ReadPayload(payload, time.Now().Add(e.timeout)); err != nil {
		return err
	}
	u := &p2pUnexpected{from: pp.rank, h: h, payload: payload}
	e.mu.Lock()
	defer e.mu.Unlock()
	if r := e.takePosted(pp.rank, h.Tag); r != nil {
		e.deliver(r, u, done)
	} else {
		e.unexpected = append(e.unexpected, u)
	}
	return nil
}
