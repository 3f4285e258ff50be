package tcp

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
)

// A StripedLink is a transport.Link over several connections to one peer (NCCL's
// "several sockets per peer"): a large frame is cut into stripes, one per connection,
// which move in parallel; a small frame travels whole on connection 0, exactly as a
// StreamLink sends it.
//
// Every stripe carries the frame's own header (the whole frame's Len and Offset, so
// the receiver checks it against what it expects exactly as StreamLink does and a
// mismatch names the peer's operation, not a stripe of it), plus the stripe's byte
// offset within the frame in the header's reserved word. Both ends cut a frame the
// same way (stripes depends only on the frame's length and the connection count), so
// the receiver knows which stripe each connection must deliver and where it goes.
//
// Sending, threads goroutines drive the connections, each in charge of the
// connections c with c % threads == its index; the caller's goroutine is thread 0, so
// a frame that fits one stripe costs no hand-off. A thread with several connections
// writes its stripes in pieces of pieceSize, turning from one connection to the next,
// so that all of them stream at once. Receiving, every connection that carries a
// stripe has a goroutine of its own, blocked in read: it drains each connection as
// fast as data comes (so no order of the sender's writes can deadlock, whatever the
// socket buffers), and the death of any connection is seen at once, not when a
// thread gets round to it.
//
// The first error on one connection (the peer died, the deadline passed, a header did
// not match) stops the whole direction at once: the other connections' deadlines are
// moved into the past, their threads return, and the call reports that first error.
// The direction is then out of step and every later call on it fails with that error.
type StripedLink struct {
	peer   int
	conns  []net.Conn
	failed atomic.Bool
	failAt atomic.Int64 // unix nanoseconds after which a failed link sends no more
	quit   chan struct{}
	once   sync.Once
	tx, rx stripeDir
	stale  atomic.Pointer[transport.StaleHandler]
	guard  safego.Guard
	fault  atomic.Pointer[error] // a helper panicked: every call fails with this
}

// OnStale implements transport.StaleDropper.
func (l *StripedLink) OnStale(h transport.StaleHandler) { l.stale.Store(&h) }

// Striping constants. Frames below 2*minStripe bytes are not striped, so latency-bound
// traffic keeps to one connection; stripes start on stripeAlign boundaries.
const (
	minStripe   = 64 << 10
	stripeAlign = 4 << 10
	pieceSize   = 256 << 10
)

// MaxSockets bounds the connections of one StripedLink.
const MaxSockets = 16

// stripeDir is one direction's state. Only the goroutine calling Send (or Recv) and
// the helper threads it starts touch it; the helpers only between a start and their
// done.
type stripeDir struct {
	recv    bool
	threads int             // goroutines that drive the connections, the caller's included
	start   []chan struct{} // one per helper thread (index 0 unused: the caller)
	done    chan error

	// The current operation, set before helpers start.
	hdr      transport.Header // want (Recv) or what to send (Send), Len = whole frame
	flags    uint8            // Recv: the frame's Flags (from stripe 0's header)
	n        int              // stripes in use
	kept     bool             // Send: the payload is kept by reference until Settle
	deadline time.Time
	socks    []stripeSock

	mu      sync.Mutex
	err     error       // first failure of the current operation
	aborted atomic.Bool // err is set
	broken  error       // a failed operation left this direction out of step
}

// stripeSock is one connection's state within a direction.
type stripeSock struct {
	part    []byte // this connection's stripe of the caller's buffer
	lo      int    // its offset in the frame
	off     int    // bytes of part moved so far
	hdrDone bool
	hdr     [transport.HeaderSize]byte
	vec     [2][]byte
	bufs    net.Buffers // kept here so that writev does not allocate
}

// NewStripedLink returns a transport.Link to peer over conns (at most MaxSockets)
// that sends with threads goroutines (1 <= threads <= len(conns)). The link owns the
// connections. The peer must list the same connections in the same order; its thread
// count may differ. guard (at most one) sets how the link's goroutines report a panic
// (see package safego); without it a panic is still recovered, and fails the link.
func NewStripedLink(peer int, conns []net.Conn, threads int, guard ...safego.Guard) (*StripedLink, error) {
	if len(conns) < 1 || len(conns) > MaxSockets {
		return nil, fmt.Errorf("striped link to rank %d: %d connections, want 1..%d", peer, len(conns), MaxSockets)
	}
	if threads < 1 || threads > len(conns) {
		return nil, fmt.Errorf("striped link to rank %d: %d threads for %d connections", peer, threads, len(conns))
	}
	l := &StripedLink{peer: peer, conns: conns, quit: make(chan struct{})}
	if len(guard) > 0 {
		l.guard = guard[0]
	}
	l.tx.threads = threads
	l.rx.recv, l.rx.threads = true, len(conns)
	for _, d := range []*stripeDir{&l.tx, &l.rx} {
		d.socks = make([]stripeSock, len(conns))
		d.start = make([]chan struct{}, d.threads)
		d.done = make(chan error, d.threads)
		for t := 1; t < d.threads; t++ {
			d.start[t] = make(chan struct{})
			l.guard.Go("tcp link sender", nil, l.helperDied, func() { l.helper(d, t) })
		}
	}
	return l, nil
}

// Peer implements transport.Link.
func (l *StripedLink) Peer() int { return l.peer }

// Sockets is the number of connections under the link.
func (l *StripedLink) Sockets() int { return len(l.conns) }

// Close implements transport.Link.
func (l *StripedLink) Close() error {
	l.failAt.CompareAndSwap(0, 1) // long past: no more sends
	l.failed.Store(true)
	l.once.Do(func() { close(l.quit) })
	var first error
	for _, c := range l.conns {
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Fail implements transport.Link.
func (l *StripedLink) Fail(grace time.Duration) {
	now := time.Now()
	if !l.failAt.CompareAndSwap(0, now.Add(grace).UnixNano()) {
		return
	}
	l.failed.Store(true)
	for _, c := range l.conns {
		_ = c.SetReadDeadline(now)
		_ = c.SetWriteDeadline(now.Add(grace))
	}
	time.AfterFunc(grace, l.guard.Func("link close timer", nil, func() { l.Close() }))
}

// Send implements transport.Link.
func (l *StripedLink) Send(h *transport.Header, p []byte, deadline time.Time) error {
	l.tx.kept = false
	return l.send(h, p, deadline)
}

// SendKept implements transport.Keeper: over sessions, p goes out without a copy.
func (l *StripedLink) SendKept(h *transport.Header, p []byte, deadline time.Time) error {
	l.tx.kept = true
	return l.send(h, p, deadline)
}

// Settle implements transport.Keeper.
func (l *StripedLink) Settle(deadline time.Time) error {
	for _, c := range l.conns {
		if k, ok := c.(keeper); ok {
			if err := k.Settle(deadline); err != nil {
				return l.wrap(&l.tx, err)
			}
		}
	}
	return nil
}

func (l *StripedLink) send(h *transport.Header, p []byte, deadline time.Time) error {
	if uint64(len(p)) > uint64(^uint32(0)) {
		return fmt.Errorf("frame of %d bytes is too large", len(p))
	}
	if f := l.fault.Load(); f != nil {
		return *f
	}
	if l.failed.Load() {
		// As StreamLink: a failed link still sends within its grace period.
		if at := time.Unix(0, l.failAt.Load()); at.Before(deadline) {
			deadline = at
		}
	}
	return l.run(&l.tx, h, p, deadline)
}

// Recv implements transport.Link.
func (l *StripedLink) Recv(want *transport.Header, p []byte, deadline time.Time) error {
	if f := l.fault.Load(); f != nil {
		return *f
	}
	if l.failed.Load() {
		return errFailed
	}
	err := l.run(&l.rx, want, p, deadline)
	if err == nil && want.Flags != l.rx.flags { // written only when it differs: callers may share want with a Send
		want.Flags = l.rx.flags
	}
	return err
}

// stripes returns how many stripes a frame of n bytes is cut into over socks
// connections, and the size of each but the last.
func stripes(n, socks int) (count, size int) {
	if socks <= 1 || n < 2*minStripe {
		return 1, n
	}
	count = min(socks, n/minStripe)
	size = (n + count - 1) / count
	size = (size + stripeAlign - 1) &^ (stripeAlign - 1)
	return (n + size - 1) / size, size
}

// run moves one frame in direction d: it sets the operation up, starts the helper
// threads that have stripes, drives thread 0 itself and waits for every helper it
// started, so that no goroutine touches p after run returns.
func (l *StripedLink) run(d *stripeDir, h *transport.Header, p []byte, deadline time.Time) error {
	if d.broken != nil {
		return d.broken
	}
	d.hdr = *h
	d.hdr.Len = uint32(len(p))
	d.deadline = deadline
	n, size := stripes(len(p), len(l.conns))
	d.n = n
	for s := 0; s < n; s++ {
		lo := s * size
		st := &d.socks[s]
		st.lo, st.part, st.off, st.hdrDone = lo, p[lo:min(lo+size, len(p))], 0, false
		var err error
		if d.recv {
			err = l.conns[s].SetReadDeadline(deadline)
		} else {
			err = l.conns[s].SetWriteDeadline(deadline)
		}
		if err != nil {
			l.abort(d, l.wrap(d, err))
		}
	}
	posted := 0
	for t := 1; t < min(d.threads, n) && !d.aborted.Load(); t++ {
		select {
		case d.start[t] <- struct{}{}:
			posted++
		case <-l.quit:
			l.abort(d, l.wrap(d, net.ErrClosed))
		}
	}
	if !d.aborted.Load() {
		if err := l.drive(d, 0); err != nil {
			l.abort(d, err)
		}
	}
	for ; posted > 0; posted-- {
		<-d.done
	}
	for s := 0; s < n; s++ {
		d.socks[s].part = nil
	}
	if d.aborted.Load() {
		d.broken = d.err
		return d.err
	}
	return nil
}

// helper is thread t of direction d: it drives its connections' stripes of each
// operation it is started for, until the link closes.
func (l *StripedLink) helper(d *stripeDir, t int) {
	for {
		select {
		case <-d.start[t]:
			err := l.guard.Run("tcp link stripe", func() error { return l.drive(d, t) })
			if err != nil {
				l.abort(d, err)
			}
			d.done <- err
		case <-l.quit:
			return
		}
	}
}

// helperDied closes the link after a panic outside a helper's operations (which
// Run already turns into that operation's error): with one helper gone, the link
// could not move another frame.
func (l *StripedLink) helperDied(err error) {
	err = fmt.Errorf("striped link to rank %d: %w", l.peer, err)
	l.fault.Store(&err)
	l.abort(&l.tx, err)
	l.abort(&l.rx, err)
	l.Close()
}

// abort records the current operation's first error and stops every connection of
// the direction, so that threads blocked on the others return at once.
func (l *StripedLink) abort(d *stripeDir, err error) {
	d.mu.Lock()
	first := !d.aborted.Load()
	if first {
		d.err = err
		d.aborted.Store(true)
	}
	d.mu.Unlock()
	if !first {
		return
	}
	past := time.Unix(1, 0)
	for _, c := range l.conns {
		if d.recv {
			_ = c.SetReadDeadline(past)
		} else {
			_ = c.SetWriteDeadline(past)
		}
	}
}

// drive moves thread t's stripes of the current operation: a step per connection in
// turn (the first one with the stripe's header), until every stripe is done.
func (l *StripedLink) drive(d *stripeDir, t int) error {
	for !d.aborted.Load() {
		active := false
		for s := t; s < d.n; s += d.threads {
			st := &d.socks[s]
			if st.hdrDone && st.off == len(st.part) {
				continue
			}
			active = true
			var err error
			if d.recv {
				err = l.recvStep(d, s, st)
			} else {
				err = l.sendStep(d, s, st)
			}
			if err != nil {
				return err
			}
		}
		if !active {
			return nil
		}
	}
	return nil // another thread failed; it reports why
}

// sendStep writes connection s's header with its first piece (one writev), or its
// next piece.
func (l *StripedLink) sendStep(d *stripeDir, s int, st *stripeSock) error {
	end := min(st.off+pieceSize, len(st.part))
	var err error
	if k, ok := l.conns[s].(keeper); ok {
		var hdr []byte
		if !st.hdrDone {
			transport.EncodeHeader(st.hdr[:], &d.hdr, d.hdr.Len)
			binary.LittleEndian.PutUint32(st.hdr[40:], uint32(st.lo))
			hdr, st.hdrDone = st.hdr[:], true
		}
		_, err = k.WriteKept(hdr, st.part[st.off:end])
		if err == nil && !d.kept {
			err = k.Settle(d.deadline)
		}
	} else if !st.hdrDone {
		transport.EncodeHeader(st.hdr[:], &d.hdr, d.hdr.Len)
		binary.LittleEndian.PutUint32(st.hdr[40:], uint32(st.lo))
		st.vec[0], st.vec[1] = st.hdr[:], st.part[:end]
		st.bufs = st.vec[:]
		if end == 0 {
			st.bufs = st.vec[:1] // a zero-byte write still waits for a reader on some conns
		}
		_, err = st.bufs.WriteTo(l.conns[s])
		st.vec[0], st.vec[1] = nil, nil
		st.hdrDone = true
	} else {
		_, err = l.conns[s].Write(st.part[st.off:end])
	}
	st.off = end
	return l.wrap(d, err)
}

// recvStep reads and checks connection s's header and its first piece, or its next
// piece.
func (l *StripedLink) recvStep(d *stripeDir, s int, st *stripeSock) error {
	if !st.hdrDone {
		got, err := l.recvStripeHeader(d, s, st)
		if err != nil {
			return err
		}
		if !got.Matches(&d.hdr) {
			return &transport.MismatchError{Peer: l.peer, Want: d.hdr, Got: got}
		}
		if s == 0 {
			d.flags = got.Flags
		}
		if lo := binary.LittleEndian.Uint32(st.hdr[40:]); int(lo) != st.lo {
			return fmt.Errorf("receive from rank %d: connection %d carries the stripe at byte %d, expected %d: %w",
				l.peer, s, lo, st.lo, transport.ErrPeerClosed)
		}
		st.hdrDone = true
	}
	end := min(st.off+pieceSize, len(st.part))
	_, err := io.ReadFull(l.conns[s], st.part[st.off:end])
	st.off = end
	return l.wrap(d, err)
}

// recvStripeHeader reads connection s's next stripe header, dropping the stripes of
// frames from older generations on the way (each connection carries its own stripe of
// such a frame, so each drops its own).
func (l *StripedLink) recvStripeHeader(d *stripeDir, s int, st *stripeSock) (transport.Header, error) {
	for {
		if _, err := io.ReadFull(l.conns[s], st.hdr[:]); err != nil {
			return transport.Header{}, l.wrap(d, err)
		}
		got, err := transport.DecodeHeader(st.hdr[:])
		if err != nil {
			return transport.Header{}, fmt.Errorf("receive from rank %d: %w", l.peer, err)
		}
		if !transport.IsStale(&got, &d.hdr) {
			return got, nil
		}
		lo := int(binary.LittleEndian.Uint32(st.hdr[40:]))
		_, size := stripes(int(got.Len), len(l.conns))
		n := min(lo+size, int(got.Len)) - lo
		if lo > int(got.Len) || (n == 0 && got.Len > 0) {
			return transport.Header{}, fmt.Errorf("receive from rank %d: a stale frame's stripe at byte %d of %d: %w",
				l.peer, lo, got.Len, transport.ErrMismatch)
		}
		if _, err := io.CopyN(io.Discard, l.conns[s], int64(n)); err != nil {
			return transport.Header{}, l.wrap(d, err)
		}
		if h := l.stale.Load(); h != nil && lo == 0 {
			(*h)(l.peer, got) // once per frame: its first stripe
		}
	}
}

func (l *StripedLink) wrap(d *stripeDir, err error) error {
	if d.recv {
		return transport.WrapConnErr(l.peer, "receive from", err)
	}
	return transport.WrapConnErr(l.peer, "send to", err)
}
