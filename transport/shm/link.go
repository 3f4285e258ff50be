package shm

import (
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
)

// DefaultRingSize is the bytes of each direction's ring.
const DefaultRingSize = 4 << 20

// pieceMax bounds how much a sender copies before publishing it, and a receiver
// before freeing it, so that one side copies a piece while the other copies the next.
const pieceMax = 64 << 10

// Spin bounds: a wait first polls for up to a spin time (adapted per direction
// between these), then sleeps on the futex. Waking a futex sleeper costs a few
// microseconds on each side, about the time a piece takes to copy, so a short poll
// keeps a streaming pair out of the kernel; a long one would steal the core the peer
// needs when ranks outnumber cores.
const (
	minSpin = 2 * time.Microsecond
	maxSpin = 50 * time.Microsecond
)

// maxSleep bounds one futex sleep: a sleeper wakes at least this often and re-checks
// its condition, so that a wake-up lost for any reason (the protocol in Link.wait
// should lose none; a peer stopped between its store and its wake could) costs at
// most this, never the whole operation's deadline. A long wait then costs one
// syscall every maxSleep, nothing on a waiter that is woken.
const maxSleep = 10 * time.Millisecond

var (
	errFailed = fmt.Errorf("link shut down after an earlier error: %w", transport.ErrPeerClosed)
	errClosed = fmt.Errorf("link closed: %w", transport.ErrPeerClosed)
)

// Link is a transport.Link over a shared-memory segment. One goroutine may send while
// another receives.
type Link struct {
	peer   int
	side   int  // 0: created the segment, 1: opened it
	remote bool // the peer is another process: waits sleep raw (see futexSleepRaw)
	conn   net.Conn

	mu  sync.RWMutex // read-held by every call; Close write-holds it to unmap
	seg *segment     // nil once closed
	tx  ring         // this side produces
	rx  ring         // this side consumes

	closing  atomic.Bool           // Close has begun
	failed   atomic.Bool           // Fail was called: receiving stops
	failAt   atomic.Int64          // unix ns after which a failed link sends no more
	peerGone atomic.Bool           // the liveness connection reached EOF
	fault    atomic.Pointer[error] // the watcher panicked: the link fails with this
	once     sync.Once

	// The sending goroutine's state, then the receiving one's, a cache line apart.
	_        [cacheLine]byte
	head     uint64        // tx bytes written (the sender's own copy)
	pub      uint64        // tx bytes published to the peer
	sendSpin time.Duration // adaptive spin budget
	hb       [transport.HeaderSize]byte
	_        [cacheLine]byte
	tail     uint64 // rx bytes read (the receiver's own copy)
	recvSpin time.Duration
	rb       [transport.HeaderSize]byte
	straddle [16]byte // an element split by the rx ring's end, for RecvPieces
	stale    atomic.Pointer[transport.StaleHandler]
}

// OnStale implements transport.StaleDropper.
func (l *Link) OnStale(h transport.StaleHandler) { l.stale.Store(&h) }

func newLink(peer, side int, seg *segment, conn net.Conn, g safego.Guard) *Link {
	l := &Link{peer: peer, side: side, remote: !seg.samePeerProcess(side), conn: conn, seg: seg,
		tx: seg.ring(side), rx: seg.ring(1 - side), sendSpin: maxSpin, recvSpin: maxSpin}
	l.head = l.tx.head.Load()
	l.pub = l.head
	l.tail = l.rx.tail.Load()
	g.Go("shm watcher", nil, l.watcherDied, l.watch)
	return l
}

// watcherDied fails the link after a panic in its watcher: without it, a dead peer
// would go unnoticed.
func (l *Link) watcherDied(err error) {
	err = fmt.Errorf("shared-memory link to rank %d: %w", l.peer, err)
	l.fault.Store(&err)
	l.peerGone.Store(true)
	l.mu.RLock()
	if l.seg != nil {
		kick(l.rx.dataEv)
		kick(l.tx.spaceEv)
	}
	l.mu.RUnlock()
}

// faulted returns the watcher's panic, or nil.
func (l *Link) faulted() error {
	if p := l.fault.Load(); p != nil {
		return *p
	}
	return nil
}

// watch reads the liveness connection: nothing is ever sent on it, so its return
// (EOF when the peer closes or dies, an error when we close) means the pair is over.
func (l *Link) watch() {
	var b [1]byte
	_, _ = l.conn.Read(b[:])
	l.peerGone.Store(true)
	l.mu.RLock()
	if l.seg != nil {
		kick(l.rx.dataEv)
		kick(l.tx.spaceEv)
	}
	l.mu.RUnlock()
}

// Peer implements transport.Link.
func (l *Link) Peer() int { return l.peer }

// Fail implements transport.Link.
func (l *Link) Fail(grace time.Duration) {
	if !l.failAt.CompareAndSwap(0, time.Now().Add(grace).UnixNano()) {
		return
	}
	l.failed.Store(true)
	l.mu.RLock()
	if l.seg != nil {
		kick(l.rx.dataEv) // a blocked Recv returns at once
	}
	l.mu.RUnlock()
	time.AfterFunc(grace, safego.Guard{}.Func("link close timer", nil, func() { l.Close() }))
}

// Close implements transport.Link: it tells the peer (through the segment and by
// closing the liveness connection), wakes every waiter on both sides, waits for this
// side's calls to return and unmaps the segment.
func (l *Link) Close() error {
	var err error
	l.once.Do(func() {
		l.failAt.CompareAndSwap(0, 1)
		l.closing.Store(true)
		s := l.seg
		s.closed(l.side).Store(1)
		for i := 0; i < 2; i++ {
			r := s.ring(i)
			kick(r.dataEv)
			kick(r.spaceEv)
		}
		err = l.conn.Close()
		l.mu.Lock()
		l.seg = nil
		err = errors.Join(err, s.unmap())
		l.mu.Unlock()
	})
	return err
}

// gone reports whether the peer will never move its counters again: it closed its end,
// or its liveness connection ended.
func (l *Link) gone() bool {
	return l.peerGone.Load() || l.seg.closed(1-l.side).Load() != 0
}

// Send implements transport.Link.
func (l *Link) Send(h *transport.Header, p []byte, deadline time.Time) error {
	if uint64(len(p)) > uint64(^uint32(0)) {
		return fmt.Errorf("frame of %d bytes is too large", len(p))
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.seg == nil || l.closing.Load() {
		return l.wrap("send to", errClosed)
	}
	if err := l.faulted(); err != nil {
		return err
	}
	if l.failed.Load() {
		// Still send within the grace period, like tcp.StreamLink: the frame tells the peer
		// what this rank was doing.
		if at := time.Unix(0, l.failAt.Load()); deadline.IsZero() || at.Before(deadline) {
			deadline = at
		}
	}
	transport.EncodeHeader(l.hb[:], h, uint32(len(p)))
	if err := l.write(l.hb[:], deadline); err != nil {
		return l.wrap("send to", err)
	}
	if err := l.write(p, deadline); err != nil {
		return l.wrap("send to", err)
	}
	l.publish()
	return nil
}

// TrySend implements transport.ImmediateSender: it sends the frame only if the tx
// ring has room for all of it (header included), so it never waits.
func (l *Link) TrySend(h *transport.Header, p []byte) (bool, error) {
	if uint64(len(p)) > uint64(^uint32(0)) {
		return false, nil
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.seg == nil || l.closing.Load() || l.failed.Load() || l.faulted() != nil {
		return false, nil
	}
	if free := uint64(len(l.tx.data)) - (l.head - l.tx.tail.Load()); free < uint64(transport.HeaderSize+len(p)) {
		return false, nil
	}
	transport.EncodeHeader(l.hb[:], h, uint32(len(p)))
	if err := l.write(l.hb[:], time.Time{}); err != nil {
		return false, l.wrap("send to", err)
	}
	if err := l.write(p, time.Time{}); err != nil {
		return false, l.wrap("send to", err)
	}
	l.publish()
	return true, nil
}

// write copies b into the tx ring, waiting for space as needed. It publishes what it
// has copied before every wait and after every pieceMax bytes; the caller publishes
// the rest.
func (l *Link) write(b []byte, deadline time.Time) error {
	r := &l.tx
	size := uint64(len(r.data))
	for len(b) > 0 {
		free := size - (l.head - r.tail.Load())
		if free == 0 {
			l.publish()
			if err := l.wait(false, deadline); err != nil {
				return err
			}
			continue
		}
		raceAcquire()
		n := min(free, uint64(len(b)), pieceMax)
		at := l.head & r.mask
		k := uint64(copy(r.data[at:], b[:n]))
		copy(r.data, b[k:n])
		l.head += n
		b = b[n:]
		if l.head-l.pub >= pieceMax {
			l.publish()
		}
	}
	return nil
}

// publish makes the bytes written so far visible to the receiver and wakes it if it
// sleeps.
func (l *Link) publish() {
	if l.pub == l.head {
		return
	}
	l.pub = l.head
	raceRelease()
	l.tx.head.Store(l.head)
	notify(l.tx.dataEv, l.tx.dataWait)
}

// Recv implements transport.Link.
func (l *Link) Recv(want *transport.Header, p []byte, deadline time.Time) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.recvHeader(want, len(p), deadline); err != nil {
		return err
	}
	if err := l.read(p, deadline); err != nil {
		return l.wrap("receive from", err)
	}
	return nil
}

// RecvPieces implements transport.PieceReceiver: the sink reads the payload where it lies in
// the rx ring, and each piece's space is freed as soon as the sink returns. An element that
// straddles the ring's end is passed through a small copy.
func (l *Link) RecvPieces(want *transport.Header, n, elemSize int, deadline time.Time, sink transport.PieceSink) error {
	if elemSize <= 0 || elemSize > len(l.straddle) || n%elemSize != 0 {
		return fmt.Errorf("receive from rank %d: %d bytes in elements of %d: %w", l.peer, n, elemSize, transport.ErrMismatch)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.recvHeader(want, n, deadline); err != nil {
		return err
	}
	r := &l.rx
	size := uint64(len(r.data))
	es := uint64(elemSize)
	for off := uint64(0); off < uint64(n); {
		avail := r.head.Load() - l.tail
		if avail < es {
			if err := l.wait(true, deadline); err != nil {
				return l.wrap("receive from", err)
			}
			continue
		}
		raceAcquire()
		at := l.tail & r.mask
		k := min(avail, uint64(n)-off, pieceMax, size-at)
		var piece []byte
		if k >= es {
			k -= k % es
			piece = r.data[at : at+k]
		} else { // the next element wraps around the ring's end
			k = es
			c := copy(l.straddle[:es], r.data[at:])
			copy(l.straddle[c:es], r.data)
			piece = l.straddle[:es]
		}
		if err := sink.Piece(int(off), piece); err != nil {
			return err
		}
		off += k
		l.tail += k
		raceRelease()
		r.tail.Store(l.tail)
		notify(r.spaceEv, r.spaceWait)
	}
	return nil
}

// recvHeader reads the next frame's header and checks it against want (with Len n).
// The caller holds l.mu for reading.
func (l *Link) recvHeader(want *transport.Header, n int, deadline time.Time) error {
	if l.seg == nil || l.closing.Load() {
		return l.wrap("receive from", errClosed)
	}
	if err := l.faulted(); err != nil {
		return err
	}
	if l.failed.Load() {
		return l.wrap("receive from", errFailed)
	}
	var got transport.Header
	for {
		if err := l.read(l.rb[:], deadline); err != nil {
			return l.wrap("receive from", err)
		}
		var err error
		if got, err = transport.DecodeHeader(l.rb[:]); err != nil {
			return fmt.Errorf("receive from rank %d: %w", l.peer, err)
		}
		if !transport.IsStale(&got, want) {
			break
		}
		// A frame of an older generation: drop it whole and read on.
		if err := l.discard(uint64(got.Len), deadline); err != nil {
			return l.wrap("receive from", err)
		}
		if h := l.stale.Load(); h != nil {
			(*h)(l.peer, got)
		}
	}
	w := *want
	w.Len = uint32(n)
	if !got.Matches(&w) {
		return &transport.MismatchError{Peer: l.peer, Want: w, Got: got}
	}
	if want.Flags != got.Flags { // written only when it differs: callers may share want with a Send
		want.Flags = got.Flags
	}
	return nil
}

// discard drops n bytes of the rx ring, waiting for them as needed.
func (l *Link) discard(n uint64, deadline time.Time) error {
	r := &l.rx
	for n > 0 {
		avail := r.head.Load() - l.tail
		if avail == 0 {
			if err := l.wait(true, deadline); err != nil {
				return err
			}
			continue
		}
		k := min(avail, n)
		n -= k
		l.tail += k
		raceRelease()
		r.tail.Store(l.tail)
		notify(r.spaceEv, r.spaceWait)
	}
	return nil
}

// read copies len(b) bytes out of the rx ring, waiting for them as needed, and frees
// the space of each piece as soon as it is copied.
func (l *Link) read(b []byte, deadline time.Time) error {
	r := &l.rx
	for len(b) > 0 {
		avail := r.head.Load() - l.tail
		if avail == 0 {
			if err := l.wait(true, deadline); err != nil {
				return err
			}
			continue
		}
		raceAcquire()
		n := min(avail, uint64(len(b)), pieceMax)
		at := l.tail & r.mask
		k := uint64(copy(b[:n], r.data[at:]))
		copy(b[k:n], r.data)
		l.tail += n
		b = b[n:]
		raceRelease()
		r.tail.Store(l.tail)
		notify(r.spaceEv, r.spaceWait)
	}
	return nil
}

// wait blocks until the rx ring has data (recv) or the tx ring has space (!recv), the
// link stops, or the deadline passes.
//
// It spins first (adapting the budget: doubled when the spin was enough, halved when
// not), then sleeps on the event word. The sleeper sets its wait flag, then reads the
// event word, then re-checks the counter; the other side stores the counter, then
// reads the wait flag and, if set, bumps the event word and wakes. Go's atomics are
// sequentially consistent, so either the sleeper sees the new counter or the other
// side sees the flag and bumps the word, and FUTEX_WAIT then returns at once. Each
// sleep lasts at most maxSleep all the same.
func (l *Link) wait(recv bool, deadline time.Time) error {
	ready := func() bool {
		if recv {
			return l.rx.head.Load() != l.tail
		}
		return l.head-l.tx.tail.Load() < uint64(len(l.tx.data))
	}
	spin := &l.sendSpin
	ev, flag := l.tx.spaceEv, l.tx.spaceWait
	if recv {
		spin = &l.recvSpin
		ev, flag = l.rx.dataEv, l.rx.dataWait
	}
	start := time.Now()
	for i := 1; ; i++ {
		if ready() {
			*spin = min(2**spin, maxSpin)
			return nil
		}
		if i%64 == 0 {
			if err := l.stoppedUnlessReady(recv, ready); err != nil {
				return err
			}
			if time.Since(start) > *spin {
				break
			}
			l.yield()
		}
	}
	*spin = max(*spin/2, minSpin)
	if l.remote && !crowded.Load() {
		// A raw sleep keeps this P: first let the goroutines queued on it run (the other
		// half of a sendrecv, just started, is on this P's queue; a spin whose budget
		// ran out before its first yield never let it run), or the peer waits for what
		// they would have sent until another P steals them.
		runtime.Gosched()
	}
	defer flag.Store(0)
	for {
		flag.Store(1)
		seq := ev.Load()
		if ready() {
			return nil
		}
		if err := l.stoppedUnlessReady(recv, ready); err != nil {
			return err
		}
		d := maxSleep
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return transport.ErrTimeout
			}
			d = min(d, left)
		}
		l.sleep(ev, seq, d)
	}
}

// yield lets others run during a spin. Where the peer is another process on a
// crowded host (SetCrowded), that is the kernel's sched_yield: the peer needs this
// core, not a goroutine of this process, and runtime.Gosched from a goroutine locked to
// its thread (a C caller's, in a cgo call back) hands the P to another thread and back,
// two context switches per yield (a tenth of a 256-rank all_reduce's). There the
// operation's sends go out on the caller's goroutine (core's sendNow) and the wait does
// not yield to the runtime before it sleeps raw either. Otherwise runtime.Gosched.
func (l *Link) yield() {
	if l.remote && crowded.Load() {
		_, _, _ = unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		return
	}
	runtime.Gosched()
}

// sleep sleeps on ev while it holds seq, at most d (<= maxSleep): raw, keeping this
// goroutine's P, where the peer is another process and a P is left for the others;
// the runtime's way otherwise, so that a peer in this process gets the P it needs to
// wake this one.
func (l *Link) sleep(ev *atomic.Uint32, seq uint32, d time.Duration) {
	if !l.remote || !rawSleepBegin() {
		futexSleep(ev, seq, d)
		return
	}
	timedOut := futexSleepRaw(ev, seq, d)
	rawSleepEnd()
	if timedOut {
		// A long wait: let this P's other goroutines run before sleeping again.
		runtime.Gosched()
	}
}

// beforeStopCheck, when a test sets it, runs in wait between its readiness check and
// stoppedUnlessReady: the window in which a peer can write its last frame and exit.
var beforeStopCheck func(*Link)

// stoppedUnlessReady is stopped, except that a receive whose peer has gone still
// succeeds when data arrived after wait last looked: a peer that sends its last frame
// and exits (a rank leaving a barrier it finished first) may do both between wait's
// readiness check and its look at the peer, and that frame must still be read.
func (l *Link) stoppedUnlessReady(recv bool, ready func() bool) error {
	if beforeStopCheck != nil {
		beforeStopCheck(l)
	}
	err := l.stopped(recv)
	if err != nil && recv && errors.Is(err, transport.ErrPeerClosed) && ready() {
		return nil
	}
	return err
}

// stopped says why a wait must end without its condition, or nil.
func (l *Link) stopped(recv bool) error {
	switch {
	case l.closing.Load():
		return errClosed
	case recv && l.failed.Load():
		return errFailed
	case l.fault.Load() != nil:
		return l.faulted()
	case l.gone():
		return fmt.Errorf("peer closed its end or exited: %w", transport.ErrPeerClosed)
	}
	return nil
}

func (l *Link) wrap(what string, err error) error {
	if errors.Is(err, transport.ErrTimeout) {
		return fmt.Errorf("%s rank %d: %w", what, l.peer, transport.ErrTimeout)
	}
	return fmt.Errorf("%s rank %d: %w", what, l.peer, err)
}
