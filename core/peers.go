package core

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
	"github.com/gonccl/gonccl/transport/tcp"
)

// Connections on demand. A rank connects at init only to the peers its first
// algorithms need (initialPeers: ring neighbours and binary-tree parent and children),
// and to any other peer the first time an operation sends to or receives from it.
// Above lazyConnectAbove ranks (or with GONCCL_RUNTIME_CONNECT=1) it connects none at
// init: every pair connects on its first operation together. So
// per-rank sockets, shared-memory segments and goroutines grow with the peers a rank
// talks to, not with the world size.
//
// One rule makes both ends racing safe: the higher rank of a pair always dials, the
// lower always accepts. A lower rank that needs a higher one first "calls" it (one
// authenticated connection on tcp.ChannelCall, closed at once), and the higher rank
// then dials as if it had needed the link itself; if it was dialling already, the call
// changes nothing. So a pair is only ever connected once, whoever needs it first.
//
//	rank 2 needs 5:  2 ──call──► 5          rank 5 needs 2:  5 ──coll, p2p──► 2
//	                 2 ◄──coll, p2p── 5
//
// Every connection proves the communicator's secret as at init (tcp.DialHandshake).
// A pair that can use shared memory then sets it up over its collective connection,
// exactly as at init. A peer that cannot be reached fails the operation that needed
// it, naming the peer, within that operation's deadline.

// initialPeers returns the peers rank connects to at init among n: its ring neighbours
// and its parent and children in the binary tree rooted at rank 0. The relation is
// symmetric (p is in initialPeers(q) iff q is in initialPeers(p)).
func initialPeers(rank, n int) []int {
	var ps []int
	add := func(p int) {
		if p >= 0 && p < n && p != rank && !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	add((rank + 1) % n)
	add((rank - 1 + n) % n)
	if rank > 0 {
		add((rank - 1) / 2)
	}
	add(2*rank + 1)
	add(2*rank + 2)
	slices.Sort(ps)
	return ps
}

type slotState uint8

const (
	slotIdle      slotState = iota
	slotDialing             // this rank (the higher) dials the peer
	slotAccepting           // this rank (the lower) waits for the peer's connections
	slotReady
	slotFailed
)

// peerSlot is this rank's connection state toward one peer.
type peerSlot struct {
	link atomic.Pointer[linkRef] // set once ready: the executor's lock-free fast path
	kept atomic.Bool             // the running operation sent on it by reference (see settle)

	mu     sync.Mutex
	state  slotState
	called bool          // this rank has called the peer (see above)
	done   chan struct{} // closed when the slot turns ready or failed
	err    error         // why it failed
	conns  []net.Conn    // accepting: the collective connections arrived so far
	msg    net.Conn      // accepting: the point-to-point connection, once arrived
	p2p    *transport.MsgConn
}

type linkRef struct{ l transport.Link }

// peerSet holds a communicator's links to its peers and makes them on demand.
type peerSet struct {
	keptMu  sync.Mutex
	kept    []int // peers whose slot's kept is set, for settle
	rank    int
	epoch   uint32           // the generation: in every handshake (see epoch.go)
	ranks   []rankInfo       // nil: fixed links given at creation (tests)
	secret  []byte           //
	tls     *tcp.TLS         // GONCCL_TLS's certificates; nil: plain TCP
	l       *net.TCPListener // accepts the peers' connections for the communicator's life
	timeout time.Duration
	retry   time.Duration // GONCCL_LINK_RETRY_MS: how long a broken TCP connection may take to come back
	sess    tcp.Registry  // the TCP sessions (see sessions.go), for reconnects to find
	// checksum (GONCCL_CHECKSUM): the sessions this rank dials carry CRC32Cs
	checksum bool
	logs     loggers
	guard    safego.Guard
	slots    []peerSlot

	mu     sync.Mutex
	closed bool
	onMsg  func(peer int, m *transport.MsgConn) // hands point-to-point channels over (see attach)
	wg     sync.WaitGroup                       // the accept loop and the handshakes
	// inflight holds the accepted connections being handled, closed by close so that
	// no handshake outlives the communicator.
	inflight map[net.Conn]struct{}
	// gate bounds the connections being authenticated at once (see handshakes.go).
	gate gate
	// quietStop ends watchQuiet (see sessions.go); nil where no session reconnects.
	quietStop chan struct{}
	// handshake bounds an unauthenticated connection's handshake.
	handshake time.Duration
	// dialed (tests only, nil in production) is called after each connection this
	// rank dials to a peer, on demand or at init, before the next.
	dialed func(rank, peer int, ch uint8)
	// brokenErr, once set, fails every link not made yet (see broken).
	brokenErr error
	// failing: failAll ran (the communicator broke); a link made later is failed with
	// failingGrace as soon as it is made.
	failing      bool
	failingGrace time.Duration

	opened atomic.Int64 // TCP connections made or accepted for links (calls excluded)
	stale  staleCounter // frames of older generations the links dropped (see dropStale)
}

// fixedPeers wraps links made elsewhere (tests over in-memory links): nothing is ever
// connected on demand.
func fixedPeers(rank int, links []transport.Link) *peerSet {
	s := &peerSet{rank: rank, slots: make([]peerSlot, len(links))}
	for p, l := range links {
		if l != nil {
			s.slots[p].link.Store(&linkRef{l})
			s.slots[p].state = slotReady
		}
	}
	return s
}

// newPeerSet starts accepting peers' connections on l (which it owns from now on).
func newPeerSet(rank int, epoch uint32, ranks []rankInfo, secret []byte, sec *tcp.TLS, l *net.TCPListener, timeout, retry time.Duration, checksum bool, logs loggers, g safego.Guard, hooks testHooks) *peerSet {
	s := &peerSet{rank: rank, epoch: epoch, ranks: ranks, secret: secret, tls: sec, l: l, timeout: timeout, retry: retry, checksum: checksum, logs: logs, guard: g,
		slots: make([]peerSlot, len(ranks)), inflight: map[net.Conn]struct{}{}, handshake: hooks.handshake(), dialed: hooks.dialed,
		gate: gate{max: maxHandshakes, grace: handshakeGrace, slow: slowGrace,
			spoke: func(c net.Conn) bool { return tcp.Received(c) >= spokeBytes }}}
	s.wg.Add(1)
	g.Go("peer accept", nil, func(err error) { s.wg.Done(); s.broken(err) }, func() {
		defer s.wg.Done()
		s.acceptLoop()
	})
	if retry > 0 {
		s.quietStop = make(chan struct{})
		s.wg.Add(1)
		g.Go("tcp quiet watch", nil, func(err error) { s.wg.Done(); s.broken(err) }, func() {
			defer s.wg.Done()
			s.watchQuiet(s.quietStop)
		})
	}
	return s
}

// broken fails every link not made yet, and every later attempt, with err: a panic
// where connections are accepted leaves this rank unable to tell what arrived.
func (s *peerSet) broken(err error) {
	s.mu.Lock()
	if s.brokenErr == nil {
		s.brokenErr = err
	}
	s.mu.Unlock()
	for p := range s.slots {
		s.fail(p, err)
	}
}

// connectInitial connects the initial peers (see initialPeers), all at once, unless
// the communicator connects every peer on first use (lazy, GONCCL_RUNTIME_CONNECT).
func (s *peerSet) connectInitial(deadline time.Time, lazy bool) error {
	if lazy {
		return nil
	}
	ps := initialPeers(s.rank, len(s.ranks))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i, p := range ps {
		s.guard.Go("init connect", &wg, func(err error) { errs[i] = err }, func() {
			// Both ends connect at init: the lower need not call.
			_, errs[i] = s.connect(p, deadline, false)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// link returns the link to peer, connecting it first if need be (by deadline).
func (s *peerSet) link(peer int, deadline time.Time) (transport.Link, error) {
	if r := s.slots[peer].link.Load(); r != nil {
		return r.l, nil
	}
	return s.connect(peer, deadline, true)
}

// linkIfAny returns the link to peer if there is one now.
func (s *peerSet) linkIfAny(peer int) transport.Link {
	if r := s.slots[peer].link.Load(); r != nil {
		return r.l
	}
	return nil
}

// connected lists the peers with a link.
func (s *peerSet) connected() []int {
	var ps []int
	for p := range s.slots {
		if s.linkIfAny(p) != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// connect makes (or waits for) the link to peer; call says whether a lower rank must
// call the peer (false at init, where the peer dials anyway).
func (s *peerSet) connect(peer int, deadline time.Time, call bool) (transport.Link, error) {
	if s.ranks == nil {
		return nil, fmt.Errorf("internal error: no link to rank %d", peer)
	}
	s.mu.Lock()
	berr := s.brokenErr
	s.mu.Unlock()
	if berr != nil {
		s.fail(peer, berr)
	}
	sl := &s.slots[peer]
	sl.mu.Lock()
	if sl.done == nil {
		sl.done = make(chan struct{})
	}
	done := sl.done
	dial := sl.state == slotIdle && peer < s.rank
	if dial {
		sl.state = slotDialing
	} else if sl.state == slotIdle {
		sl.state = slotAccepting
	}
	doCall := call && peer > s.rank && sl.state == slotAccepting && !sl.called
	if doCall {
		sl.called = true
	}
	sl.mu.Unlock()
	switch {
	case dial:
		s.dial(peer, deadline)
	case doCall:
		c, err := tcp.DialOnce(s.ranks[peer].Addr, s.secret, s.tls, tcp.Hello{From: s.rank, To: peer, Channel: tcp.ChannelCall, Epoch: s.epoch}, deadline)
		if err != nil {
			s.fail(peer, fmt.Errorf("asking rank %d (%s) to connect: %w", peer, s.where(peer), err))
		} else {
			c.Close()
		}
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		sl.mu.Lock()
		got := len(sl.conns) - countNil(sl.conns)
		if sl.msg != nil {
			got++
		}
		sl.mu.Unlock()
		s.fail(peer, fmt.Errorf("%w: waiting for rank %d (%s) to connect (%d connections of its link arrived): has it exited, or is it stuck before init?",
			ErrTimeout, peer, s.where(peer), got))
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.state == slotReady {
		return sl.link.Load().l, nil
	}
	return nil, sl.err
}

func countNil(cs []net.Conn) int {
	n := 0
	for _, c := range cs {
		if c == nil {
			n++
		}
	}
	return n
}

// where describes peer for errors: its host and address.
func (s *peerSet) where(peer int) string {
	ri := s.ranks[peer]
	return fmt.Sprintf("pid %d on %s at %s", ri.Pid, ri.Hostname, ri.Addr)
}

// dial connects to a lower peer: its collective connections (together), then its
// point-to-point one, then finishes the link. The peer's link is complete when the
// point-to-point connection arrives.
func (s *peerSet) dial(peer int, deadline time.Time) {
	socks, _ := pairSockets(s.ranks[s.rank], s.ranks[peer])
	conns := make([]net.Conn, socks+1) // the last: point-to-point
	errs := make([]error, len(conns))
	dialOne := func(i int) {
		ch := uint8(tcp.ChannelP2P)
		if i < socks {
			ch = tcp.CollChannel(i)
		}
		h := tcp.Hello{From: s.rank, To: peer, Channel: ch, Epoch: s.epoch, Link: s.newLinkID(peer)}
		h.Checksum = h.Link != 0 && s.checksum
		c, err := tcp.DialOnce(s.ranks[peer].Addr, s.secret, s.tls, h, deadline)
		if err != nil {
			errs[i] = err
			return
		}
		c = s.session(c, h)
		s.opened.Add(1)
		conns[i] = c
		if s.dialed != nil {
			s.dialed(s.rank, peer, ch)
		}
	}
	var wg sync.WaitGroup
	for i := range socks {
		s.guard.Go("peer dial", &wg, func(err error) { errs[i] = err }, func() { dialOne(i) })
	}
	wg.Wait()
	if errors.Join(errs...) == nil {
		s.guard.Go("peer dial", &wg, func(err error) { errs[socks] = err }, func() { dialOne(socks) })
		wg.Wait()
	}
	if err := errors.Join(errs...); err != nil {
		closeConns(conns)
		s.fail(peer, fmt.Errorf("connecting to rank %d (%s): %w", peer, s.where(peer), err))
		return
	}
	s.finish(peer, conns[:socks], conns[socks], deadline)
}

func closeConns(cs []net.Conn) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}

// finish builds the link to peer over its connections (shared memory where the pair
// can), and makes it ready.
func (s *peerSet) finish(peer int, conns []net.Conn, msg net.Conn, deadline time.Time) {
	_, threads := pairSockets(s.ranks[s.rank], s.ranks[peer])
	var link transport.Link
	if len(conns) == 1 {
		link = tcp.NewStreamLink(peer, conns[0])
	} else {
		sl, err := tcp.NewStripedLink(peer, conns, threads, s.guard)
		if err != nil {
			closeConns(append(conns, msg))
			s.fail(peer, fmt.Errorf("rank %d: %w", peer, err))
			return
		}
		link = sl
		s.logs.net.Info(fmt.Sprintf("rank %d: %d tcp connections, %d sending goroutines", peer, len(conns), threads))
	}
	me, ri := s.ranks[s.rank], s.ranks[peer]
	if sl, ok := link.(*tcp.StreamLink); ok && ri.Host == me.Host && ri.Shm && me.Shm {
		l, err := shm.Connect(sl.Conn(), peer, s.rank < peer, shm.DefaultRingSize, deadline, s.guard)
		switch {
		case err == nil:
			link = l
		case errors.Is(err, shm.ErrUnavailable):
			s.logs.shm.Warn(fmt.Sprintf("rank %d keeps tcp: %v", peer, err))
		default:
			closeConns(append(conns, msg))
			s.fail(peer, fmt.Errorf("setting up shared memory with rank %d: %w", peer, err))
			return
		}
	}
	if name := tcp.PeerName(msg); name != "" {
		s.logs.net.Info(fmt.Sprintf("rank %d: TLS 1.3 on its %d connections, peer certificate %s", peer, len(conns)+1, name))
	}
	if d, ok := link.(transport.StaleDropper); ok {
		d.OnStale(s.dropStale)
	}
	m := transport.NewMsgConn(peer, msg)
	sl := &s.slots[peer]
	s.mu.Lock()
	closed, onMsg := s.closed, s.onMsg
	s.mu.Unlock()
	if onMsg != nil && !closed {
		onMsg(peer, m) // before the link is ready: a send that waited for it finds its channel
		m = nil
	}
	sl.mu.Lock()
	if closed || sl.state == slotFailed {
		sl.mu.Unlock()
		link.Close()
		if m != nil {
			m.Close()
		}
		s.fail(peer, fmt.Errorf("rank %d: %w", peer, ErrClosed))
		return
	}
	sl.state = slotReady
	sl.link.Store(&linkRef{link})
	sl.p2p = m // nil, or for attach to hand over
	close(sl.done)
	sl.mu.Unlock()
	s.mu.Lock() // after the link is visible: failAll either sees it or is seen here
	failing, grace := s.failing, s.failingGrace
	s.mu.Unlock()
	if failing {
		link.Fail(grace)
	}
}

// fail marks the slot to peer failed with err, unless it is ready or failed already.
func (s *peerSet) fail(peer int, err error) {
	sl := &s.slots[peer]
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.state == slotReady || sl.state == slotFailed {
		return
	}
	sl.state, sl.err = slotFailed, err
	closeConns(append(sl.conns, sl.msg))
	sl.conns, sl.msg = nil, nil
	if sl.done == nil {
		sl.done = make(chan struct{})
	}
	close(sl.done)
}

// attach hands every point-to-point channel made so far, and each one made later, to
// onMsg.
func (s *peerSet) attach(onMsg func(peer int, m *transport.MsgConn)) {
	s.mu.Lock()
	s.onMsg = onMsg
	s.mu.Unlock()
	for p := range s.slots {
		sl := &s.slots[p]
		sl.mu.Lock()
		m := sl.p2p
		sl.p2p = nil
		sl.mu.Unlock()
		if m != nil {
			onMsg(p, m)
		}
	}
}

// failAll shuts every link down after an error (see transport.Link.Fail), and each
// link made from now on as soon as it is made: an operation that was connecting to a
// peer when the communicator broke must not wait on the new link until its deadline.
func (s *peerSet) failAll(grace time.Duration) {
	s.mu.Lock()
	if !s.failing {
		s.failing, s.failingGrace = true, grace
	}
	s.mu.Unlock()
	for p := range s.slots {
		if l := s.linkIfAny(p); l != nil {
			l.Fail(grace)
		}
	}
}

// closeLink closes the link to peer, if any.
func (s *peerSet) closeLink(peer int) {
	if peer >= 0 && peer < len(s.slots) {
		if l := s.linkIfAny(peer); l != nil {
			l.Close()
		}
	}
}

// close stops accepting, fails every connection under way and closes every link;
// blocked sends and receives return at once. Point-to-point channels not yet handed
// over are closed too.
func (s *peerSet) close() {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	var inflight []net.Conn
	for c := range s.inflight {
		inflight = append(inflight, c)
	}
	s.mu.Unlock()
	if !already && s.l != nil {
		if s.quietStop != nil {
			close(s.quietStop)
		}
		s.l.Close()
		closeConns(inflight)
		s.wg.Wait()
	}
	for p := range s.slots {
		s.fail(p, fmt.Errorf("rank %d: %w", p, ErrClosed))
		sl := &s.slots[p]
		sl.mu.Lock()
		m := sl.p2p
		sl.p2p = nil
		sl.mu.Unlock()
		if m != nil {
			m.Close()
		}
		if l := s.linkIfAny(p); l != nil {
			l.Close()
		}
	}
}

// allShm says whether every peer is (or will be) reached through shared memory: for
// the cost model, which every rank must evaluate alike, so it is computed from the
// ranks' announcements rather than from the links made so far.
func (s *peerSet) allShm() bool {
	if s.ranks == nil {
		for p := range s.slots {
			if l := s.linkIfAny(p); l != nil && transportName(l) != "shm" {
				return false
			}
		}
		return true
	}
	me := s.ranks[s.rank]
	for _, ri := range s.ranks {
		if ri.Host != me.Host || !ri.Shm || !me.Shm {
			return false
		}
	}
	return true
}

// onePidNamespace reports whether every rank is in this rank's pid namespace (ranks
// that did not say, in-process tests, count as in it).
func (s *peerSet) onePidNamespace() bool {
	if s.ranks == nil {
		return true
	}
	me := s.ranks[s.rank]
	for _, ri := range s.ranks {
		if ri.PidNS != me.PidNS {
			return false
		}
	}
	return true
}

// runtimeConnect is GONCCL_RUNTIME_CONNECT: "0", "1" or "auto".
type runtimeConnect string

// lazyConnectAbove is the largest communicator that connects its initial peers during
// init under GONCCL_RUNTIME_CONNECT=auto. At 256 ranks on a 2-core host, init took a
// median 1.62 s with those connections and 0.98 s without (bench/scale, five runs
// each): every rank's init waited for its neighbours to be scheduled and to finish
// theirs.
const lazyConnectAbove = 64

// lazy reports whether a communicator of n ranks connects every peer on first use.
func (r runtimeConnect) lazy(n int) bool {
	switch r {
	case "1":
		return true
	case "0":
		return false
	}
	return n > lazyConnectAbove
}
