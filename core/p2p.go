package core

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
)

// Point-to-point messaging runs beside the executor, never through it: every pair of
// ranks has a connection of its own for it (tcp.ChannelP2P), with one reader and one
// writer goroutine per peer. Sends and receives therefore progress in any order and
// interleave freely with collectives.
//
//	Send ──► peer's frame queue ──► writer goroutine ──► conn ──► reader goroutine ──┐
//	Recv ──► match against unexpected messages, else post ◄── match arrivals ◄──────┘
//
// Protocol (transport.MsgKind): a message of at most p2pEagerBytes goes out at once as
// one eager frame; the receiving side reads it straight into a posted receive's buffer,
// or holds it as "unexpected" until a receive is posted. A larger message is only
// announced (rts); the receiver answers cts once a matching receive is posted, and the
// payload (data) is then read straight into that receive's buffer. Memory held for
// unexpected messages is thus at most p2pEagerBytes per message (plus a header for each
// announced large one); it is not otherwise bounded: a rank that sends many small
// messages nobody receives grows its peer's memory until their deadline.
//
// Matching follows MPI: a message from rank p with tag t goes to the oldest posted
// receive from p (or from AnySource) with tag t; a new receive takes the oldest
// unexpected message that fits it. Messages between two ranks with one tag arrive in
// send order.

// AnySource as Recv's peer matches a message from any rank.
const AnySource = -1

// p2pEagerBytes is the largest message sent without waiting for the receiver.
const p2pEagerBytes = 64 << 10

type recvState uint8

const (
	recvPosted  recvState = iota // in p2pEngine.posted
	recvRdv                      // matched an rts, cts sent, waiting for data
	recvReading                  // the reader is filling its buffer
	recvDone
)

type sendState uint8

const (
	sendQueued  sendState = iota // its eager, rts or data frame waits in the peer's queue
	sendWaitCTS                  // rts written, waiting for the receiver's cts
	sendWriting                  // the writer is writing its payload
	sendDone
)

type p2pRecv struct {
	req      *Request
	buf      []byte
	src      int // peer, or AnySource
	tag      int64
	what     string
	timeout  time.Duration
	deadline time.Time
	timer    *time.Timer
	state    recvState
	from     int    // the peer matched
	seq      uint64 // the matched message's number (rendezvous)
}

type p2pSend struct {
	req      *Request
	buf      []byte
	peer     int
	tag      int64
	seq      uint64
	what     string
	timeout  time.Duration
	deadline time.Time
	timer    *time.Timer
	state    sendState
	frame    *p2pFrame // its frame while queued
}

type p2pFrame struct {
	h        transport.MsgHeader
	payload  []byte
	send     *p2pSend // for eager, rts and data frames
	deadline time.Time
	queued   bool
	written  chan struct{} // if set, closed once the frame is on the wire (bye)
}

// p2pUnexpected is a message that arrived before a receive for it was posted.
type p2pUnexpected struct {
	from    int
	h       transport.MsgHeader
	payload []byte // eager messages only
}

type p2pPeer struct {
	rank       int
	conn       *transport.MsgConn
	wake       *sync.Cond // on p2pEngine.mu: frames queued or peer failed
	ctrl, data []*p2pFrame
	nextSeq    uint64              // last message number sent
	lastSeq    uint64              // last message number received (reader only)
	waitCTS    map[uint64]*p2pSend // announced, not yet cleared by the receiver
	withdrawn  map[uint64]bool     // announced, then timed out before a cts
	rdv        map[uint64]*p2pRecv // cts sent, waiting for the data
	reading    *p2pRecv            // the receive the reader is filling
	writing    *p2pSend            // the send the writer is writing
	err        error               // set once the channel failed
	lastSent   atomic.Int64        // unix ns of the last frame written (heartbeats)
}

// p2pEngine is one communicator's point-to-point state. All fields are guarded by mu;
// completions run after mu is released.
type p2pEngine struct {
	rank, nranks int
	timeout      time.Duration
	log          *zap.Logger
	guard        safego.Guard // starts its goroutines (see safety.go)

	mu         sync.Mutex
	peers      []*p2pPeer // nil at this rank
	posted     []*p2pRecv // in posting order
	unexpected []*p2pUnexpected
	nsend      uint64
	nrecv      uint64
	closed     error
	leaving    error // set before close says goodbye: peers hanging up then do not count as lost
	wg         sync.WaitGroup

	status        func() statusReport                                   // this rank's progress, for peers that ask (see status.go)
	onDead        func(rank int, err error)                             // a peer missed its heartbeats (see heartbeat.go)
	onLost        func(rank, from int, reason string, now, silent bool) // a peer says rank is lost (see lost.go)
	stop          chan struct{}                                         // closed by close: ends the heartbeat goroutine
	hbPaused      atomic.Bool                                           // tests: stop sending heartbeats
	statusAnswers chan statusAnswer                                     // where peers' answers go while this rank asks
}

// completion is a request to finish once mu is released.
type completion struct {
	req   *Request
	timer *time.Timer
	err   error
}

type completions []completion

func (cs completions) run() {
	for _, c := range cs {
		if c.timer != nil {
			c.timer.Stop()
		}
		c.req.complete(c.err)
	}
}

// startP2P starts point-to-point messaging over msgs (one per peer, nil at this rank;
// a nil slice for none yet: peers join later through addPeer).
func (c *Comm) startP2P(msgs []*transport.MsgConn) {
	e := &p2pEngine{rank: c.rank, nranks: c.nranks, timeout: c.timeout, log: c.logs.net, guard: c.cfg.guard(c.logs.net),
		peers: make([]*p2pPeer, c.nranks), status: c.status, onDead: c.peerDead, onLost: c.lossReported, stop: make(chan struct{})}
	c.p2p = e // before its goroutines start: a panic handler may use it
	for r, m := range msgs {
		if m != nil && r != c.rank {
			e.addPeer(r, m)
		}
	}
	if c.cfg != nil && c.cfg.heartbeatTimeout > 0 {
		e.guard.Go("heartbeat", &e.wg, c.heartbeatDied, func() {
			e.heartbeat(heartbeatInterval(c.cfg.heartbeatTimeout), c.cfg.heartbeatTimeout)
		})
	}
}

// addPeer starts messaging with rank r over m (made at init or on demand): its
// writer and reader goroutines. After close, m is closed instead.
func (e *p2pEngine) addPeer(r int, m *transport.MsgConn) {
	e.mu.Lock()
	if e.closed != nil || e.peers[r] != nil {
		e.mu.Unlock()
		m.Close()
		return
	}
	p := &p2pPeer{rank: r, conn: m, wake: sync.NewCond(&e.mu),
		waitCTS: map[uint64]*p2pSend{}, withdrawn: map[uint64]bool{}, rdv: map[uint64]*p2pRecv{}}
	p.lastSent.Store(time.Now().UnixNano())
	e.peers[r] = p
	peerDied := func(err error) { e.failPeer(p, err) }
	e.guard.Go("p2p writer", &e.wg, peerDied, func() { e.writer(p) })
	e.guard.Go("p2p reader", &e.wg, peerDied, func() { e.reader(p) })
	e.mu.Unlock()
}

// peer returns rank r's channel, or nil.
func (e *p2pEngine) peer(r int) *p2pPeer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.peers[r]
}

func (c *Comm) checkP2P(what string, buf []byte, count int, dt DataType, peer, tag int, anyOK bool) error {
	if c.p2p == nil {
		return fmt.Errorf("gonccl rank %d: %s: %w: this communicator has no point-to-point channels", c.rank, what, ErrNotSupported)
	}
	if !dt.Valid() {
		return invalidf("%s: unknown data type %d", what, uint8(dt))
	}
	if count < 0 {
		return invalidf("%s: negative count %d", what, count)
	}
	if err := checkByteSize(what, count, dt); err != nil {
		return err
	}
	if es := dt.Size(); len(buf) < count*es {
		return invalidf("%s: buffer holds %d bytes, need %d (%d x %s)", what, len(buf), count*es, count, dt)
	}
	switch {
	case anyOK && peer == AnySource:
		if c.nranks < 2 {
			return invalidf("%s: no other rank to receive from (communicator of 1 rank)", what)
		}
	case peer < 0 || peer >= c.nranks:
		return invalidf("%s: peer %d is out of range for %d ranks", what, peer, c.nranks)
	case peer == c.rank:
		return invalidf("%s: peer %d is this rank; sending to oneself is not supported", what, peer)
	}
	if int64(tag) != int64(int32(tag)) {
		return invalidf("%s: tag %d does not fit in 32 bits", what, tag)
	}
	return nil
}

// Send sends count elements of dt from buf to peer with tag. It returns at once; the
// request completes when the data has been written to the connection (buf may then be
// reused). Messages larger than 64 KiB are written only once peer has posted the
// matching receive. Unlike collectives, sends do not wait for earlier operations. The
// first send to a peer not connected yet connects to it first (see peers.go).
func (c *Comm) Send(buf []byte, count int, dt DataType, peer, tag int) (*Request, error) {
	if err := c.checkP2P("send", buf, count, dt, peer, tag, false); err != nil {
		return nil, err
	}
	timeout := c.Timeout()
	if c.p2p.peer(peer) == nil && c.peers.ranks != nil { // first message to peer: connect
		if _, err := c.peers.link(peer, time.Now().Add(timeout)); err != nil {
			return nil, &OpError{Rank: c.rank, Op: fmt.Sprintf("send to rank %d", peer), Peer: peer, Err: err}
		}
	}
	return c.p2p.send(buf[:count*dt.Size()], count, dt, peer, int64(tag), timeout)
}

// Recv receives count elements of dt from peer (or AnySource) with tag into buf. It
// returns at once; the request completes when the data is in buf, and its Source
// names the sender. A message of another byte size fails the receive with ErrMismatch
// (and the sender learns of it: its request fails if it is still waiting for this
// receive, as large messages do, else it logs a warning).
func (c *Comm) Recv(buf []byte, count int, dt DataType, peer, tag int) (*Request, error) {
	if err := c.checkP2P("recv", buf, count, dt, peer, tag, true); err != nil {
		return nil, err
	}
	return c.p2p.recv(buf[:count*dt.Size()], count, dt, peer, int64(tag), c.Timeout())
}

// send and recv fail their request if it has not finished within timeout (the
// communicator's when it was issued; see Comm.SetTimeout).
func (e *p2pEngine) send(p []byte, count int, dt DataType, peer int, tag int64, timeout time.Duration) (*Request, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nsend++
	what := fmt.Sprintf("send #%d to rank %d (tag %d, %s x %d)", e.nsend, peer, tag, dt, count)
	if e.closed != nil {
		return nil, &OpError{Rank: e.rank, Op: what, Peer: peer, Err: e.closed}
	}
	pp := e.peers[peer]
	if pp == nil {
		return nil, &OpError{Rank: e.rank, Op: what, Peer: peer, Err: fmt.Errorf("%w: no channel to rank %d", ErrNotSupported, peer)}
	}
	if pp.err != nil {
		return nil, &OpError{Rank: e.rank, Op: what, Peer: peer, Err: pp.err}
	}
	pp.nextSeq++
	s := &p2pSend{req: newRequest(), buf: p, peer: peer, tag: tag, seq: pp.nextSeq, what: what,
		timeout: timeout, deadline: time.Now().Add(timeout)}
	s.req.source = peer
	f := &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgEager, DType: uint8(dt), Seq: s.seq, Tag: tag, Len: uint64(len(p))},
		payload: p, send: s, deadline: s.deadline}
	if len(p) > p2pEagerBytes {
		f.h.Kind, f.payload = transport.MsgRTS, nil
		pp.waitCTS[s.seq] = s
	}
	s.frame = f
	e.enqueue(pp, f, false)
	s.timer = time.AfterFunc(timeout, e.guard.Func("p2p send timer", e.timerDied(s.req, s.peer), func() { e.expireSend(s) }))
	return s.req, nil
}

func (e *p2pEngine) recv(p []byte, count int, dt DataType, src int, tag int64, timeout time.Duration) (*Request, error) {
	e.mu.Lock()
	e.nrecv++
	from := fmt.Sprintf("rank %d", src)
	if src == AnySource {
		from = "any rank"
	}
	r := &p2pRecv{req: newRequest(), buf: p, src: src, tag: tag, from: src,
		what:    fmt.Sprintf("recv #%d from %s (tag %d, %s x %d)", e.nrecv, from, tag, dt, count),
		timeout: timeout, deadline: time.Now().Add(timeout)}
	r.req.source = src
	if e.closed != nil {
		e.mu.Unlock()
		return nil, &OpError{Rank: e.rank, Op: r.what, Peer: src, Err: e.closed}
	}
	var done completions
	if u := e.takeUnexpected(src, tag); u != nil {
		e.deliver(r, u, &done)
		if r.state != recvDone { // waiting for an announced message's data: it has a deadline too
			r.timer = time.AfterFunc(timeout, e.guard.Func("p2p recv timer", e.timerDied(r.req, r.src), func() { e.expireRecv(r) }))
		}
	} else if src != AnySource && e.peers[src] != nil && e.peers[src].err != nil {
		e.mu.Unlock()
		return nil, &OpError{Rank: e.rank, Op: r.what, Peer: src, Err: e.peers[src].err}
	} else {
		e.posted = append(e.posted, r)
		r.timer = time.AfterFunc(timeout, e.guard.Func("p2p recv timer", e.timerDied(r.req, r.src), func() { e.expireRecv(r) }))
	}
	e.mu.Unlock()
	done.run()
	return r.req, nil
}

// enqueue queues f for pp's writer; control frames go ahead of messages. mu held.
func (e *p2pEngine) enqueue(pp *p2pPeer, f *p2pFrame, ctrl bool) {
	f.queued = true
	if ctrl {
		pp.ctrl = append(pp.ctrl, f)
	} else {
		pp.data = append(pp.data, f)
	}
	pp.wake.Signal()
}

func (e *p2pEngine) control(pp *p2pPeer, kind transport.MsgKind, seq, n uint64) {
	e.enqueue(pp, &p2pFrame{h: transport.MsgHeader{Kind: kind, Seq: seq, Len: n}, deadline: time.Now().Add(e.timeout)}, true)
}

// unqueue removes f from pp's queues. mu held.
func unqueue(pp *p2pPeer, f *p2pFrame) {
	for _, q := range []*[]*p2pFrame{&pp.ctrl, &pp.data} {
		for i, g := range *q {
			if g == f {
				*q = append((*q)[:i], (*q)[i+1:]...)
				f.queued = false
				return
			}
		}
	}
}

// takePosted removes and returns the oldest posted receive matching a message from
// peer with tag. mu held.
func (e *p2pEngine) takePosted(peer int, tag int64) *p2pRecv {
	for i, r := range e.posted {
		if r.tag == tag && (r.src == peer || r.src == AnySource) {
			e.posted = append(e.posted[:i], e.posted[i+1:]...)
			r.from = peer
			r.req.setSource(peer)
			return r
		}
	}
	return nil
}

// takeUnexpected removes and returns the oldest unexpected message a receive from src
// with tag matches. mu held.
func (e *p2pEngine) takeUnexpected(src int, tag int64) *p2pUnexpected {
	for i, u := range e.unexpected {
		if u.h.Tag == tag && (src == AnySource || u.from == src) {
			e.unexpected = append(e.unexpected[:i], e.unexpected[i+1:]...)
			return u
		}
	}
	return nil
}

// deliver hands an unexpected message to the receive r. mu held.
func (e *p2pEngine) deliver(r *p2pRecv, u *p2pUnexpected, done *completions) {
	r.from = u.from
	r.req.setSource(u.from)
	if u.h.Kind == transport.MsgRTS {
		e.acceptRTS(r, u.h, done)
		return
	}
	r.state = recvDone
	if err := e.sizeCheck(r, u.h); err != nil {
		*done = append(*done, completion{r.req, r.timer, err})
		return
	}
	copy(r.buf, u.payload)
	*done = append(*done, completion{r.req, r.timer, nil})
}

// sizeCheck fails a receive whose size differs from the message's, and tells the
// sender. mu held.
func (e *p2pEngine) sizeCheck(r *p2pRecv, h transport.MsgHeader) error {
	if h.Len == uint64(len(r.buf)) {
		return nil
	}
	if pp := e.peers[r.from]; pp.err == nil {
		e.control(pp, transport.MsgNack, h.Seq, uint64(len(r.buf)))
	}
	return &OpError{Rank: e.rank, Op: r.what, Peer: r.from, Err: fmt.Errorf(
		"%w: rank %d sent %d bytes (%s, tag %d) but rank %d's receive expects %d bytes",
		ErrMismatch, r.from, h.Len, DataType(h.DType), h.Tag, e.rank, len(r.buf))}
}

// acceptRTS answers an announced message now that r matches it. mu held.
func (e *p2pEngine) acceptRTS(r *p2pRecv, h transport.MsgHeader, done *completions) {
	if err := e.sizeCheck(r, h); err != nil {
		r.state = recvDone
		*done = append(*done, completion{r.req, r.timer, err})
		return
	}
	pp := e.peers[r.from]
	r.state, r.seq = recvRdv, h.Seq
	pp.rdv[h.Seq] = r
	e.control(pp, transport.MsgCTS, h.Seq, 0)
}

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
		if err := pp.conn.Write(&f.h, f.payload, f.deadline); err != nil {
			e.failPeer(pp, err)
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

// handle processes one incoming frame. An error breaks the channel.
func (e *p2pEngine) handle(pp *p2pPeer, h transport.MsgHeader) error {
	var done completions
	defer func() { done.run() }()
	switch h.Kind {
	case transport.MsgEager, transport.MsgRTS:
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
				e.acceptRTS(r, h, &done)
			} else {
				e.unexpected = append(e.unexpected, &p2pUnexpected{from: pp.rank, h: h})
			}
			e.mu.Unlock()
			return nil
		}
		if r == nil {
			e.mu.Unlock()
			return e.readUnexpected(pp, h, &done)
		}
		if err := e.sizeCheck(r, h); err != nil {
			r.state = recvDone
			done = append(done, completion{r.req, r.timer, err})
			e.mu.Unlock()
			return pp.conn.Discard(h.Len, time.Now().Add(e.timeout))
		}
		return e.fill(pp, r, &done)
	case transport.MsgData:
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
			done = append(done, completion{r.req, r.timer, &OpError{Rank: e.rank, Op: r.what, Peer: pp.rank, Err: err}})
			e.mu.Unlock()
			return err
		}
		return e.fill(pp, r, &done)
	case transport.MsgCTS:
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
	case transport.MsgNack:
		e.mu.Lock()
		s := pp.waitCTS[h.Seq]
		delete(pp.waitCTS, h.Seq)
		delete(pp.withdrawn, h.Seq)
		if s != nil {
			s.state = sendDone
			done = append(done, completion{s.req, s.timer, &OpError{Rank: e.rank, Op: s.what, Peer: pp.rank, Err: fmt.Errorf(
				"%w: rank %d's receive (tag %d) expects %d bytes but rank %d sent %d bytes",
				ErrMismatch, pp.rank, s.tag, h.Len, e.rank, len(s.buf))}})
		}
		e.mu.Unlock()
		if s == nil {
			e.log.Warn(fmt.Sprintf("gonccl rank %d: rank %d rejected message #%d: its receive expected %d bytes, a different size from what this rank sent",
				e.rank, pp.rank, h.Seq, h.Len))
		}
	case transport.MsgStatusQuery:
		e.answerStatus(pp)
	case transport.MsgStatus:
		return e.readStatus(pp, h)
	case transport.MsgBye:
		return e.readBye(pp, h)
	case transport.MsgHeartbeat: // its arrival is the point (see heartbeat.go)
	case transport.MsgLost:
		return e.readLost(pp, h)
	case transport.MsgCancel:
		e.mu.Lock()
		r := pp.rdv[h.Seq]
		delete(pp.rdv, h.Seq)
		if r != nil {
			r.state = recvDone
			done = append(done, completion{r.req, r.timer, &OpError{Rank: e.rank, Op: r.what, Peer: pp.rank,
				Err: fmt.Errorf("%w: rank %d's matching send timed out before it could deliver the data", ErrTimeout, pp.rank)}})
		}
		e.mu.Unlock()
	}
	return nil
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
	hint := fmt.Sprintf("is rank %d alive, and did it send with this tag and size?", r.from)
	if r.src == AnySource && r.seq == 0 {
		hint = "did any rank send with this tag?"
	}
	r.req.complete(&OpError{Rank: e.rank, Op: r.what, Peer: r.src, Err: fmt.Errorf("%w after %v (%s)", ErrTimeout, r.timeout, hint)})
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
	s.req.complete(&OpError{Rank: e.rank, Op: s.what, Peer: s.peer, Err: fmt.Errorf(
		"%w after %v (is rank %d alive, and did it post the matching receive?)", ErrTimeout, s.timeout, s.peer)})
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
	pp.err = fmt.Errorf("lost rank %d: %w", pp.rank, err)
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
	if len(done) > 0 && !closed {
		e.log.Warn(fmt.Sprintf("gonccl rank %d: point-to-point channel to rank %d failed with %d operations pending: %v",
			e.rank, pp.rank, len(done), err))
	}
	done.run()
	return true
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
