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
	written  chan struct{} // if set, closed once the frame is on the wire or can no longer go out (bye)
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
	linkDown      func(rank int) (bool, time.Time)                      // whether a TCP connection to rank is reconnecting, since when
	linkRetry     time.Duration                                         // GONCCL_LINK_RETRY_MS
	onLost        func(rank, from int, reason string, now, silent bool) // a peer says rank is lost (see lost.go)
	onFailed      func(from, by int, reason string, class uint64)       // a peer says from's communicator failed (see devreport.go)
	onDevSize     func(from int, msg, bytes uint64)                     // a peer's device-path send to this rank (see devp2psize.go)
	onRefused     func(from int, kind Kind, seq uint64, reason string)  // a peer refused a collective (see refuse.go)
	onEnded       func()                                                // a peer's channel failed or closed (see awaitCause)
	stop          chan struct{}                                         // closed by close: ends the heartbeat goroutine
	statusAnswers chan statusAnswer                                     // where peers' answers go while this rank asks
	wins          windowTable                                           // one-sided windows, for frames that write into them (see window.go)
	byeDelay      time.Duration                                         // testHooks.byeDelay
	lostDelay     time.Duration                                         // testHooks.lostDelay
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
		peers: make([]*p2pPeer, c.nranks), status: c.status, onDead: c.peerDead, onLost: c.lossReported, onFailed: c.failureReported, onDevSize: c.devSizeAnnounced, onRefused: c.refusalReported, onEnded: c.heard, stop: make(chan struct{})}
	if c.cfg != nil && c.peers != nil {
		e.linkDown, e.linkRetry = c.peers.linkDown, c.cfg.linkRetry
	}
	if c.cfg != nil {
		e.byeDelay, e.lostDelay = c.cfg.test.byeDelay, c.cfg.test.lostDelay
	}
	c.p2p = e // before its goroutines start: a panic handler may use it
	for r, m := range msgs {
		if m != nil && r != c.rank {
			e.addPeer(r, m)
		}
	}
	if c.cfg != nil && c.cfg.heartbeatTimeout > 0 {
		e.guard.Go("heartbeat", &e.wg, c.heartbeatDied, func() {
			e.heartbeat(heartbeatInterval(c.cfg.heartbeatTimeout), c.cfg.heartbeatTimeout, c.cfg.test.heartbeatsPaused)
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
	if c.Suspended() {
		return nil, fmt.Errorf("gonccl rank %d: send: %w", c.rank, ErrSuspended)
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
	if c.Suspended() {
		return nil, fmt.Errorf("gonccl rank %d: recv: %w", c.rank, ErrSuspended)
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
