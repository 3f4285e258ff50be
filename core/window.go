package core

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
)

// One-sided windows (torch's c10d::Window, NCCL 2.29's ncclWindow): each rank exposes
// a buffer that the other ranks write into with Put, and ranks order each other with
// Signal / WaitSignal, without the target calling anything per transfer.
//
// Every rank's window memory is a shared-memory segment of its own (shm.WindowSegment:
// signal counters, then the data). How a rank reaches a peer's window depends only on
// where the peer is:
//
//	same host (UNIFIED)     the peer's segment is mapped here: Put is a copy into it,
//	                        Signal an atomic add on its counter, and Memory hands out
//	                        the mapping itself (torch's map_remote_tensor)
//	another host (SEPARATE) Put and Signal are frames (MsgWinPut, MsgWinSignal) on the
//	                        point-to-point channel; the peer's reader copies the payload
//	                        into its segment and adds to the counter. The channel keeps
//	                        them in order, so a signal lands after the puts before it.
//
// Either way the target's WaitSignal reads its own counters, so it neither knows nor
// cares how the signal came. Creation, Register and Deregister are collective: every
// rank calls them in the same order (relative to collectives too); Free is local.

// Access is how this rank reaches a peer's window.
type Access uint8

const (
	// AccessUnified: the peer's window is mapped in this process (same host).
	AccessUnified Access = 0
	// AccessSeparate: the peer's window is reached by messages only (another host).
	AccessSeparate Access = 1
)

func (a Access) String() string {
	if a == AccessUnified {
		return "unified"
	}
	return "separate"
}

// Window is one rank's end of a one-sided window.
type Window struct {
	c  *Comm
	id int64

	mu    sync.Mutex
	reg   *winReg // nil while no buffer is registered
	freed bool
}

// winReg is a registered window: this rank's memory and its view of every rank's.
type winReg struct {
	local  *winMem
	fd     int       // the local segment's memfd, open for peers until deregistered
	peers  []*winMem // mapped windows of same-host peers (and this rank); nil: remote
	bytes  []int     // each rank's window size in bytes
	dtypes []DataType
	// device: the window's memory is device memory that capi maps for the peers
	// (RegisterDevice); the segments hold only the signal counters.
	device bool
	// waits counts the signals WaitSignal has claimed from each rank (per source).
	waits []atomic.Uint32
}

// winMem is one mapping of a window segment, unmapped when its last holder lets go:
// the registration holds one reference, and so does every tensor handed out over it.
type winMem struct {
	seg  *shm.WindowSegment
	refs atomic.Int32
}

// WindowHold keeps a window's memory mapped (see Window.Memory) until Release.
type WindowHold struct {
	m    *winMem
	once sync.Once
}

// Release lets go of the memory; the last holder unmaps it.
func (h *WindowHold) Release() {
	if h != nil {
		h.once.Do(func() { h.m.release() })
	}
}

func (m *winMem) retain() *winMem {
	m.refs.Add(1)
	return m
}

func (m *winMem) release() {
	if m.refs.Add(-1) == 0 {
		_ = m.seg.Unmap()
	}
}

// windowTable is a communicator's windows by id, for its point-to-point reader.
type windowTable struct {
	mu   sync.Mutex
	next int64
	m    map[int64]*Window
}

// NewWindow creates an empty window (collective; nothing is exchanged until Register).
func (c *Comm) NewWindow() (*Window, error) {
	if c.p2p == nil {
		return nil, fmt.Errorf("gonccl rank %d: new window: %w: this communicator has no point-to-point channels", c.rank, ErrNotSupported)
	}
	if err := c.Err(); err != nil {
		return nil, &OpError{Rank: c.rank, Op: "new window", Peer: -1, Err: err}
	}
	t := &c.p2p.wins
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	w := &Window{c: c, id: t.next}
	if t.m == nil {
		t.m = map[int64]*Window{}
	}
	t.m[w.id] = w
	return w, nil
}

// ID is the window's number on its communicator (the same on every rank).
func (w *Window) ID() int64 { return w.id }

// winInfo is what each rank tells the others about its window at Register.
const winInfoBytes = 96

type winInfo struct {
	pid, fd int
	dtype   DataType
	shm     bool
	device  bool // the data is device memory outside the segment (RegisterDevice)
	bytes   int
	token   shm.WindowToken
	host    [32]byte
}

func (i *winInfo) encode(b []byte) {
	binary.LittleEndian.PutUint32(b[0:], 0x4e495747) // "GWIN"
	binary.LittleEndian.PutUint32(b[4:], uint32(i.pid))
	binary.LittleEndian.PutUint32(b[8:], uint32(int32(i.fd)))
	b[12] = uint8(i.dtype)
	if i.shm {
		b[13] = 1
	}
	if i.device {
		b[14] = 1
	}
	binary.LittleEndian.PutUint64(b[16:], uint64(i.bytes))
	copy(b[24:40], i.token[:])
	copy(b[40:72], i.host[:])
}

func decodeWinInfo(b []byte) (winInfo, error) {
	if binary.LittleEndian.Uint32(b[0:]) != 0x4e495747 {
		return winInfo{}, errors.New("not a window description")
	}
	i := winInfo{pid: int(binary.LittleEndian.Uint32(b[4:])), fd: int(int32(binary.LittleEndian.Uint32(b[8:]))),
		dtype: DataType(b[12]), shm: b[13] == 1, device: b[14] == 1, bytes: int(binary.LittleEndian.Uint64(b[16:]))}
	copy(i.token[:], b[24:40])
	copy(i.host[:], b[40:72])
	return i, nil
}

// Register gives the window count elements of dt (collective), initialised from
// init (nil: zeros; else count elements' bytes). The memory is gonccl's: Memory
// returns it. Peers on this host map each other's windows; the others are reached
// through the point-to-point channel.
func (w *Window) Register(init []byte, count int, dt DataType) error {
	return w.register(init, count, dt, false)
}

// RegisterDevice registers a window of count elements of dt whose memory is device
// memory the caller shares with the peers itself (capi maps it through CUDA IPC):
// core keeps only the signal counters, in shared memory as for host windows, so Signal
// and WaitSignal work as they do there, while Put and Memory are the caller's. Every
// rank must register device memory, and every rank must be on this host: otherwise
// every rank gets the same error, naming a rank that is not. A peer whose counters
// cannot be mapped is reported by Attr as AccessSeparate; the caller refuses the
// window then.
func (w *Window) RegisterDevice(count int, dt DataType) error {
	return w.register(nil, count, dt, true)
}

func (w *Window) register(init []byte, count int, dt DataType, device bool) error {
	c := w.c
	what := fmt.Sprintf("register window %d", w.id)
	if !dt.Valid() {
		return invalidf("%s: unknown data type %d", what, uint8(dt))
	}
	if count < 0 {
		return invalidf("%s: negative count %d", what, count)
	}
	if err := checkByteSize(what, count, dt); err != nil {
		return err
	}
	n := count * dt.Size()
	if init != nil && len(init) < n {
		return invalidf("%s: initial data holds %d bytes, need %d", what, len(init), n)
	}
	if init != nil {
		init = init[:n]
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.freed:
		return fmt.Errorf("%w: %s: the window was freed", ErrInvalidArgument, what)
	case w.reg != nil:
		return fmt.Errorf("%w: %s: a buffer is registered already (deregister it first)", ErrInvalidArgument, what)
	}
	segBytes := n
	if device {
		segBytes = 0 // the counters only: the data is the caller's device memory
	}
	seg, fd, token, err := shm.CreateWindow(c.nranks, segBytes, init)
	if err != nil {
		return &OpError{Rank: c.rank, Op: what, Peer: -1, Err: err}
	}
	local := &winMem{seg: seg}
	local.refs.Store(1)
	r := &winReg{local: local, fd: fd, peers: make([]*winMem, c.nranks), bytes: make([]int, c.nranks),
		dtypes: make([]DataType, c.nranks), waits: make([]atomic.Uint32, c.nranks), device: device}
	// Published before the exchange: once a peer has this rank's description it may
	// put at once, and the reader must find the memory.
	w.reg = r
	me := winInfo{pid: os.Getpid(), fd: fd, dtype: dt, shm: c.cfg == nil || !c.cfg.shmDisable, device: device, bytes: n,
		token: token, host: sha256.Sum256([]byte(hostIdentity()))}
	all, err := w.exchange(&me)
	if err == nil && firstDevice(all) >= 0 {
		err = deviceWindowPeers(all) // on every rank, host ones too: they all fail alike
	}
	if err != nil {
		w.reg = nil
		r.drop()
		return &OpError{Rank: c.rank, Op: what, Peer: -1, Err: err}
	}
	for p, pi := range all {
		r.bytes[p], r.dtypes[p] = pi.bytes, pi.dtype
		switch {
		case p == c.rank:
			r.peers[p] = local.retain()
		case pi.host == me.host && pi.shm && me.shm:
			size := pi.bytes
			if device {
				size = 0
			}
			s, err := shm.OpenWindow(pi.pid, pi.fd, c.nranks, size, pi.token)
			if err != nil {
				// Still reachable: through messages, as if it were on another host.
				c.p2p.log.Warn(fmt.Sprintf("gonccl rank %d: %s: cannot map rank %d's window, reaching it through messages: %v", c.rank, what, p, err))
				continue
			}
			m := &winMem{seg: s}
			m.refs.Store(1)
			r.peers[p] = m
		}
	}
	return nil
}

// deviceWindowPeers checks that a device window's ranks all registered device memory
// and all run on one host with shared memory; every rank sees the same descriptions,
// so every rank returns the same error.
func deviceWindowPeers(all []winInfo) error {
	for p, pi := range all {
		if !pi.device {
			return fmt.Errorf("%w: rank %d registered host memory and rank %d device memory: a window's ranks must all register device (CUDA) memory or all host memory",
				ErrMismatch, p, firstDevice(all))
		}
	}
	for p, pi := range all {
		switch {
		case pi.host != all[0].host:
			return fmt.Errorf("%w: rank %d runs on another host than rank 0: a window over device (CUDA) memory needs every rank on one host, where CUDA IPC maps the peers' memory (register host memory to reach other hosts)",
				ErrNotSupported, p)
		case !pi.shm:
			return fmt.Errorf("%w: rank %d has shared memory disabled (GONCCL_SHM_DISABLE): a window over device (CUDA) memory keeps its signal counters in shared memory",
				ErrNotSupported, p)
		}
	}
	return nil
}

func firstDevice(all []winInfo) int {
	for p, pi := range all {
		if pi.device {
			return p
		}
	}
	return -1
}

// exchange all-gathers the ranks' window descriptions.
func (w *Window) exchange(me *winInfo) ([]winInfo, error) {
	c := w.c
	send, recv := make([]byte, winInfoBytes), make([]byte, winInfoBytes*c.nranks)
	me.encode(send)
	req, err := c.AllGather(send, recv, winInfoBytes, Uint8)
	if err != nil {
		return nil, err
	}
	if _, err := req.Wait(-1); err != nil {
		return nil, err
	}
	all := make([]winInfo, c.nranks)
	for p := range all {
		if all[p], err = decodeWinInfo(recv[p*winInfoBytes:]); err != nil {
			return nil, fmt.Errorf("rank %d's window description: %w", p, err)
		}
	}
	return all, nil
}

// drop lets go of everything a registration holds.
func (r *winReg) drop() {
	for _, m := range r.peers {
		if m != nil {
			m.release()
		}
	}
	r.local.release()
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// Deregister releases the registered memory (collective: the ranks first agree that
// all of them are done with it). Memory held through Memory stays valid until its
// holds are released.
func (w *Window) Deregister() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.deregister()
}

func (w *Window) deregister() error {
	c := w.c
	what := fmt.Sprintf("deregister window %d", w.id)
	if w.reg == nil {
		return fmt.Errorf("%w: %s: no buffer is registered", ErrInvalidArgument, what)
	}
	req, err := c.Barrier()
	if err == nil {
		_, err = req.Wait(-1)
	}
	r := w.reg
	w.reg = nil
	r.drop()
	if err != nil {
		return &OpError{Rank: c.rank, Op: what, Peer: -1, Err: err}
	}
	return nil
}

// Free forgets the window and lets go of its memory at once, without waiting for the
// other ranks (unlike Deregister): a peer that still writes to it here is told nothing,
// and its frames are dropped with a warning. Later calls on it fail.
func (w *Window) Free() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed {
		return nil
	}
	w.freed = true
	t := &w.c.p2p.wins
	t.mu.Lock()
	delete(t.m, w.id)
	t.mu.Unlock()
	if w.reg != nil {
		w.reg.drop()
		w.reg = nil
	}
	return nil
}

// registered returns the registration, or an error saying there is none.
func (w *Window) registered(what string) (*winReg, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.freed:
		return nil, fmt.Errorf("%w: %s: the window was freed", ErrInvalidArgument, what)
	case w.reg == nil:
		return nil, fmt.Errorf("%w: %s: no buffer is registered with window %d (register one first)", ErrInvalidArgument, what, w.id)
	}
	return w.reg, nil
}

func (w *Window) checkPeer(what string, peer int) error {
	if peer < 0 || peer >= w.c.nranks {
		return invalidf("%s: rank %d is out of range for %d ranks", what, peer, w.c.nranks)
	}
	return nil
}

// Attr says how this rank reaches peer's window.
func (w *Window) Attr(peer int) (Access, error) {
	what := "window attributes"
	if err := w.checkPeer(what, peer); err != nil {
		return 0, err
	}
	r, err := w.registered(what)
	if err != nil {
		return 0, err
	}
	if r.peers[peer] != nil {
		return AccessUnified, nil
	}
	return AccessSeparate, nil
}

// Info returns rank's window size in elements of its data type.
func (w *Window) Info(rank int) (count int, dt DataType, err error) {
	what := "window info"
	if err := w.checkPeer(what, rank); err != nil {
		return 0, 0, err
	}
	r, err := w.registered(what)
	if err != nil {
		return 0, 0, err
	}
	return r.bytes[rank] / r.dtypes[rank].Size(), r.dtypes[rank], nil
}

// Memory returns rank's window memory as mapped in this process: this rank's own, or a
// same-host peer's (writes to it land in the peer's window). The hold keeps it mapped
// after Deregister until released. A rank on another host cannot be mapped.
func (w *Window) Memory(rank int) ([]byte, *WindowHold, error) {
	what := fmt.Sprintf("map rank %d's window %d", rank, w.id)
	if err := w.checkPeer(what, rank); err != nil {
		return nil, nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed || w.reg == nil {
		return nil, nil, fmt.Errorf("%w: %s: no buffer is registered with the window", ErrInvalidArgument, what)
	}
	if w.reg.device {
		return nil, nil, fmt.Errorf("%w: %s: the window holds device memory, which the CUDA layer maps", ErrInvalidArgument, what)
	}
	m := w.reg.peers[rank]
	if m == nil {
		return nil, nil, &OpError{Rank: w.c.rank, Op: what, Peer: rank, Err: fmt.Errorf(
			"%w: rank %d is on another host (separate access): its window cannot be mapped here; write to it with put and order with signal/wait_signal",
			ErrNotSupported, rank)}
	}
	return m.seg.Data(), &WindowHold{m: m.retain()}, nil
}

// Put copies src (count elements of dt) into peer's window at element dstOffset (in
// peer's window's elements, whose type must be dt). The request completes when src
// may be reused: at once on the same host, once the data is written to the
// connection otherwise. Pair it with Signal so that the peer knows it has arrived.
func (w *Window) Put(src []byte, count int, dt DataType, peer int, dstOffset int) (*Request, error) {
	what := fmt.Sprintf("put to rank %d's window %d", peer, w.id)
	if err := w.checkPeer(what, peer); err != nil {
		return nil, err
	}
	if !dt.Valid() {
		return nil, invalidf("%s: unknown data type %d", what, uint8(dt))
	}
	if count < 0 || dstOffset < 0 {
		return nil, invalidf("%s: negative count %d or offset %d", what, count, dstOffset)
	}
	if err := checkByteSize(what, count, dt); err != nil {
		return nil, err
	}
	es := dt.Size()
	if len(src) < count*es {
		return nil, invalidf("%s: source holds %d bytes, need %d (%d x %s)", what, len(src), count*es, count, dt)
	}
	src = src[:count*es]
	r, err := w.registered(what)
	if err != nil {
		return nil, err
	}
	if r.device {
		return nil, fmt.Errorf("%w: %s: the window holds device memory: put a device buffer through the CUDA layer", ErrInvalidArgument, what)
	}
	if err := r.checkPut(what, count, dt, peer, dstOffset); err != nil {
		return nil, err
	}
	off := dstOffset * es
	if m := r.peers[peer]; m != nil {
		copy(m.seg.Data()[off:], src)
		req := newRequest()
		req.complete(nil)
		return req, nil
	}
	return w.sendFrame(what, peer, transport.MsgHeader{Kind: transport.MsgWinPut, DType: uint8(dt), Seq: uint64(off), Tag: w.id, Len: uint64(len(src))}, src)
}

// CheckPut checks a put of count elements of dt into peer's window at element
// dstOffset against what peer registered: its type and its size.
func (w *Window) CheckPut(what string, count int, dt DataType, peer, dstOffset int) error {
	if err := w.checkPeer(what, peer); err != nil {
		return err
	}
	if count < 0 || dstOffset < 0 {
		return invalidf("%s: negative count %d or offset %d", what, count, dstOffset)
	}
	r, err := w.registered(what)
	if err != nil {
		return err
	}
	return r.checkPut(what, count, dt, peer, dstOffset)
}

func (r *winReg) checkPut(what string, count int, dt DataType, peer, dstOffset int) error {
	if r.dtypes[peer] != dt {
		return fmt.Errorf("%w: %s: rank %d's window holds %s, the source is %s", ErrMismatch, what, peer, r.dtypes[peer], dt)
	}
	if total := r.bytes[peer] / dt.Size(); dstOffset > total || count > total-dstOffset {
		return invalidf("%s: elements [%d, %d) do not fit in its window of %d elements", what, dstOffset, dstOffset+count, total)
	}
	return nil
}

// Signal adds one to peer's count of signals from this rank, after every Put this rank
// issued to peer before it.
func (w *Window) Signal(peer int) (*Request, error) {
	what := fmt.Sprintf("signal to rank %d on window %d", peer, w.id)
	if err := w.checkPeer(what, peer); err != nil {
		return nil, err
	}
	r, err := w.registered(what)
	if err != nil {
		return nil, err
	}
	if m := r.peers[peer]; m != nil {
		m.seg.Signal(w.c.rank)
		req := newRequest()
		req.complete(nil)
		return req, nil
	}
	return w.sendFrame(what, peer, transport.MsgHeader{Kind: transport.MsgWinSignal, Tag: w.id}, nil)
}

// sendFrame queues a window frame to peer on the point-to-point channel (connecting
// first if need be); its request completes once it is written.
func (w *Window) sendFrame(what string, peer int, h transport.MsgHeader, payload []byte) (*Request, error) {
	c := w.c
	timeout := c.Timeout()
	if c.p2p.peer(peer) == nil && c.peers.ranks != nil {
		if _, err := c.peers.link(peer, time.Now().Add(timeout)); err != nil {
			return nil, &OpError{Rank: c.rank, Op: what, Peer: peer, Err: err}
		}
	}
	e := c.p2p
	e.mu.Lock()
	defer e.mu.Unlock()
	pp := e.peers[peer]
	switch {
	case e.closed != nil:
		return nil, &OpError{Rank: e.rank, Op: what, Peer: peer, Err: e.closed}
	case pp == nil:
		return nil, &OpError{Rank: e.rank, Op: what, Peer: peer, Err: fmt.Errorf("%w: no channel to rank %d", ErrNotSupported, peer)}
	case pp.err != nil:
		return nil, &OpError{Rank: e.rank, Op: what, Peer: peer, Err: pp.err}
	}
	s := &p2pSend{req: newRequest(), buf: payload, peer: peer, what: what, timeout: timeout, deadline: time.Now().Add(timeout)}
	s.req.source = peer
	s.frame = &p2pFrame{h: h, payload: payload, send: s, deadline: s.deadline}
	e.enqueue(pp, s.frame, false)
	s.timer = time.AfterFunc(timeout, e.guard.Func("window send timer", e.timerDied(s.req, s.peer), func() { e.expireSend(s) }))
	return s.req, nil
}

// WaitSignal waits for the next signal from peer (each call consumes one; signals that
// came earlier count). The request fails if none comes within the communicator's
// timeout, naming peer, or if peer's channel or the communicator fails first.
func (w *Window) WaitSignal(peer int) (*Request, error) {
	c := w.c
	if err := w.checkPeer("wait for a signal", peer); err != nil {
		return nil, err
	}
	r, err := w.registered(fmt.Sprintf("wait for a signal from rank %d", peer))
	if err != nil {
		return nil, err
	}
	ticket := r.waits[peer].Add(1)
	what := fmt.Sprintf("wait_signal #%d from rank %d on window %d", ticket, peer, w.id)
	arrived := func() bool { return int32(r.local.seg.Signals(peer)-ticket) >= 0 }
	req := newRequest()
	req.source = peer
	if arrived() {
		req.complete(nil)
		return req, nil
	}
	timeout := c.Timeout()
	deadline := time.Now().Add(timeout)
	seg := r.local.retain() // the registration may go while this waits
	c.p2p.guard.Go("window wait", nil, func(err error) { req.complete(err) }, func() {
		defer seg.release()
		err := w.waitFor(what, peer, timeout, deadline, arrived, func(seen uint32, d time.Duration) {
			seg.seg.SleepSignal(peer, seen, d)
		}, func() uint32 { return seg.seg.Signals(peer) })
		if err != nil {
			// A failed wait consumed nothing: the next one waits for the same signal
			// (unless a later wait was issued meanwhile, which keeps its own ticket).
			r.waits[peer].CompareAndSwap(ticket, ticket-1)
		}
		req.complete(err)
	})
	return req, nil
}

// waitFor sleeps until arrived, the deadline, or a failure of peer or the communicator,
// checking those every slice.
func (w *Window) waitFor(what string, peer int, timeout time.Duration, deadline time.Time, arrived func() bool,
	sleep func(seen uint32, d time.Duration), load func() uint32) error {
	c := w.c
	const slice = 50 * time.Millisecond
	for !arrived() {
		if err := c.Err(); err != nil {
			return &OpError{Rank: c.rank, Op: what, Peer: peer, Err: err}
		}
		if err := c.p2p.peerErr(peer); err != nil {
			return &OpError{Rank: c.rank, Op: what, Peer: peer, Err: err}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return &OpError{Rank: c.rank, Op: what, Peer: peer, Err: fmt.Errorf(
				"%w after %v: rank %d has sent %d signals on this window so far (is rank %d alive, and did it call signal?)",
				ErrTimeout, timeout, peer, load(), peer)}
		}
		sleep(load(), min(left, slice))
	}
	return nil
}

// peerErr is the failure of peer's point-to-point channel, if it failed.
func (e *p2pEngine) peerErr(peer int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed != nil {
		return e.closed
	}
	if pp := e.peers[peer]; pp != nil {
		return pp.err
	}
	return nil
}

// window finds a registered window for a frame from peer; the returned memory is
// held (release it when done) or nil if the window is gone.
func (e *p2pEngine) window(id int64) *winMem {
	t := &e.wins
	t.mu.Lock()
	w := t.m[id]
	t.mu.Unlock()
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.reg == nil {
		return nil
	}
	return w.reg.local.retain()
}

// readWinPut writes a put's payload from pp into the window it names (or drops it,
// with a warning, if that window is gone or too small: the sender checked the bounds,
// so only a put racing a deregistration gets here).
func (e *p2pEngine) readWinPut(pp *p2pPeer, h transport.MsgHeader) error {
	deadline := time.Now().Add(e.timeout)
	m := e.window(h.Tag)
	if m == nil {
		e.log.Warn(fmt.Sprintf("gonccl rank %d: dropped a put of %d bytes from rank %d to window %d, which has no registered buffer here", e.rank, h.Len, pp.rank, h.Tag))
		return pp.conn.Discard(h.Len, deadline)
	}
	defer m.release()
	data := m.seg.Data()
	if h.Seq > uint64(len(data)) || h.Len > uint64(len(data))-h.Seq {
		e.log.Warn(fmt.Sprintf("gonccl rank %d: dropped a put from rank %d to bytes [%d, %d) of window %d, which has %d bytes", e.rank, pp.rank, h.Seq, h.Seq+h.Len, h.Tag, len(data)))
		return pp.conn.Discard(h.Len, deadline)
	}
	return pp.conn.ReadPayload(data[h.Seq:h.Seq+h.Len], deadline)
}

// readWinSignal counts a signal from pp on the window it names.
func (e *p2pEngine) readWinSignal(pp *p2pPeer, h transport.MsgHeader) {
	m := e.window(h.Tag)
	if m == nil {
		e.log.Warn(fmt.Sprintf("gonccl rank %d: dropped a signal from rank %d to window %d, which has no registered buffer here", e.rank, pp.rank, h.Tag))
		return
	}
	m.seg.Signal(pp.rank)
	m.release()
}
