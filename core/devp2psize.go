package core

import (
	"fmt"
	"sync"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// Sizes of device-path sends and receives. The device path (package cuda,
// devp2p.go) matches a pair's messages in the order they were enqueued and moves
// them in chunks through slots, guided by flags that count chunks: it never learns
// a message's size on the other rank. A send and its receive of different sizes
// would leave the streams waiting until the timeout (different chunk counts) or hand
// the receiver truncated or stale bytes (the same count). So capi tells core the
// size of every device-path send and receive it enqueues (NoteDeviceSend,
// NoteDeviceRecv; an alltoallv's blocks too, which go as such messages), in the
// order it enqueues them: a send's size goes to its receiver
// over the point-to-point channel (MsgDevSize: the message's number among this
// rank's device-path sends to the receiver, and its bytes), which compares it with
// the size of its own receive of the same number from that sender. On a difference
// the receiver breaks its communicator with a mismatch through the device path's
// failure route (FailDevice): its watcher releases its streams, and its peers are
// told (devreport.go), so the sender fails with the same message.
//
// The announcement never blocks the enqueue: it is queued on the channel (made
// first, on a goroutine of its own, if the pair has none yet). A channel that cannot
// be made drops it: a lost peer is named by the loss, not by this check. Sends to
// oneself are compared at once.

// devSizeMatch is a communicator's record of device-path message sizes.
type devSizeMatch struct {
	mu     sync.Mutex
	sent   []uint64      // device-path sends enqueued to each rank
	peers  []devSizePeer // per peer: its messages to this rank, and this rank's to it
	failed bool          // a mismatch was found: nothing more is compared
}

// devSizePeer is what devSizeMatch keeps for one peer.
type devSizePeer struct {
	announced  []uint64 // sizes of the peer's sends, not compared yet, oldest first
	expected   []uint64 // sizes of this rank's receives from it, not compared yet
	compared   uint64   // messages from the peer compared so far
	heard      uint64   // number of the peer's last announcement
	pending    []uint64 // sizes of sends to the peer waiting for a channel, in order
	pendingTo  uint64   // number of the last of them
	connecting bool     // a goroutine is making the channel to the peer
	unchecked  bool     // an announcement from the peer was lost: no more compared
}

// init sizes m for nranks. m.mu held.
func (m *devSizeMatch) init(nranks int) {
	if m.sent == nil {
		m.sent = make([]uint64, nranks)
		m.peers = make([]devSizePeer, nranks)
	}
}

// NoteDeviceSend records that this rank enqueued, on the device path, a send of
// bytes to peer, after every earlier one: the receiver learns its size.
func (c *Comm) NoteDeviceSend(peer, bytes int) {
	if peer < 0 || peer >= c.nranks || bytes < 0 {
		return
	}
	m := &c.devSizes
	m.mu.Lock()
	if m.failed {
		m.mu.Unlock()
		return
	}
	m.init(c.nranks)
	m.sent[peer]++
	n := m.sent[peer]
	if peer == c.rank {
		p := &m.peers[peer]
		p.heard = n
		p.announced = append(p.announced, uint64(bytes))
		err := c.devSizeCompareLocked(peer)
		m.mu.Unlock()
		if err != nil {
			c.FailDevice(err)
		}
		return
	}
	defer m.mu.Unlock()
	p := &m.peers[peer]
	if p.connecting {
		p.pending, p.pendingTo = append(p.pending, uint64(bytes)), n
		return
	}
	if c.p2p == nil || c.p2p.announceDevSize(peer, n, uint64(bytes)) {
		return
	}
	if c.peers == nil || c.peers.ranks == nil {
		return // no channel, and none can be made (links made elsewhere)
	}
	p.connecting = true
	p.pending, p.pendingTo = append(p.pending, uint64(bytes)), n
	c.guard.Go("device size announce", nil, nil, func() { c.devSizeConnect(peer) })
}

// devSizeConnect makes the channel to peer, then sends the sizes waiting for it.
func (c *Comm) devSizeConnect(peer int) {
	_, err := c.peers.link(peer, time.Now().Add(c.Timeout()))
	m := &c.devSizes
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &m.peers[peer]
	first := p.pendingTo - uint64(len(p.pending)) + 1
	for i, b := range p.pending {
		if err != nil || m.failed || !c.p2p.announceDevSize(peer, first+uint64(i), b) {
			break // dropped: see above
		}
	}
	p.pending, p.connecting = nil, false
}

// NoteDeviceRecv records that this rank enqueued, on the device path, a receive of
// bytes from peer, after every earlier one: it is compared with the peer's send.
func (c *Comm) NoteDeviceRecv(peer, bytes int) {
	if peer < 0 || peer >= c.nranks || bytes < 0 {
		return
	}
	m := &c.devSizes
	m.mu.Lock()
	if m.failed {
		m.mu.Unlock()
		return
	}
	m.init(c.nranks)
	p := &m.peers[peer]
	if p.unchecked {
		m.mu.Unlock()
		return
	}
	p.expected = append(p.expected, uint64(bytes))
	err := c.devSizeCompareLocked(peer)
	m.mu.Unlock()
	if err != nil {
		c.FailDevice(err)
	}
}

// devSizeAnnounced takes a peer's announcement (MsgDevSize) that its device-path
// send number msg to this rank has bytes bytes.
func (c *Comm) devSizeAnnounced(from int, msg, bytes uint64) {
	m := &c.devSizes
	m.mu.Lock()
	if m.failed {
		m.mu.Unlock()
		return
	}
	m.init(c.nranks)
	p := &m.peers[from]
	if p.unchecked {
		m.mu.Unlock()
		return
	}
	if msg != p.heard+1 {
		p.unchecked, p.announced, p.expected = true, nil, nil
		m.mu.Unlock()
		c.logs.net.Warn(fmt.Sprintf("rank %d announced device message #%d after #%d; sizes from it are no longer checked",
			from, msg, p.heard))
		return
	}
	p.heard = msg
	p.announced = append(p.announced, bytes)
	err := c.devSizeCompareLocked(from)
	m.mu.Unlock()
	if err != nil {
		c.FailDevice(err)
	}
}

// devSizeCompareLocked compares the sizes from peer known on both sides; it returns
// the mismatch of the first that differ, after which nothing more is compared.
// c.devSizes.mu held.
func (c *Comm) devSizeCompareLocked(peer int) error {
	m := &c.devSizes
	p := &m.peers[peer]
	for len(p.announced) > 0 && len(p.expected) > 0 {
		sent, want := p.announced[0], p.expected[0]
		p.announced, p.expected = p.announced[1:], p.expected[1:]
		p.compared++
		if sent != want {
			m.failed = true
			for i := range m.peers {
				m.peers[i].announced, m.peers[i].expected = nil, nil
			}
			return fmt.Errorf("%w: rank %d sent %d bytes to rank %d (device message #%d) but rank %d's receive expects %d bytes",
				ErrMismatch, peer, sent, c.rank, p.compared, c.rank, want)
		}
	}
	return nil
}

// announceDevSize queues the size of this rank's device-path send number msg to
// peer on its channel; false if there is no channel to peer (yet). A channel that
// failed, or a closed engine, drops it.
func (e *p2pEngine) announceDevSize(peer int, msg, bytes uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed != nil || e.leaving != nil {
		return true
	}
	pp := e.peers[peer]
	if pp == nil {
		return false
	}
	if pp.err == nil {
		e.enqueue(pp, &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgDevSize, Seq: msg, Len: bytes},
			deadline: time.Now().Add(e.timeout)}, true)
	}
	return true
}

// readDevSize hands a peer's MsgDevSize to onDevSize (it has no payload).
func (e *p2pEngine) readDevSize(pp *p2pPeer, h transport.MsgHeader) {
	if e.onDevSize != nil {
		e.onDevSize(pp.rank, h.Seq, h.Len)
	}
}
