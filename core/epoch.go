package core

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// Membership epochs. Each communicator generation has an epoch: a fresh communicator
// has the one its creator passes (0 by default), and a communicator made from another
// by shrinking or reconfiguring has its parent's epoch plus one. The epoch travels in
// three places, so that nothing of an older generation is mixed into a newer one:
//
//   - the bootstrap: every rank tells the root its epoch, and the root refuses a rank
//     whose epoch differs from the first one's;
//   - the handshake of every connection (it is covered by the HMAC): a rank of another
//     generation that dials in is logged and dropped;
//   - every collective frame's header: a frame of an older generation arriving on a
//     link (a late frame) is read whole, dropped, logged and counted, and the receiver
//     goes on waiting for its own; a frame of a newer generation means this rank was
//     left behind, and is a mismatch error.
//
// Point-to-point messages travel on connections that belong to one generation (the
// handshake binds them to it), so their frames carry no epoch of their own.

// staleCounter counts the frames of older generations a communicator dropped.
type staleCounter struct{ n atomic.Uint64 }

// Epoch returns the communicator's generation.
func (c *Comm) Epoch() uint32 { return c.epoch }

// StaleFrames returns how many frames of older generations the communicator's links
// have dropped.
func (c *Comm) StaleFrames() uint64 { return c.peers.stale.n.Load() }

// dropStale is every link's report of a frame of an older generation it dropped (see
// peerSet.finish, which registers it on each link as the link is made).
func (s *peerSet) dropStale(peer int, got transport.Header) {
	s.stale.n.Add(1)
	s.logs.net.Warn(fmt.Sprintf("dropped a %d-byte frame of generation (epoch) %d from rank %d (op seq %d, kind %d): this communicator is epoch %d",
		got.Len, got.Epoch, peer, got.Seq, got.Kind, s.epoch))
}

// injectStale is the GONCCL_TEST_INJECT_STALE test hook: in a communicator of epoch E >
// 0, before its first operation, this rank sends every peer it connected to at init
// (see initialPeers: all of them up to 4 ranks) a frame of epoch E-1 that
// looks like the first all_reduce of count float32s, with a payload that would spoil
// any sum: a late frame of the previous generation, which the peers must drop.
func (c *Comm) injectStale(count int) {
	if c.epoch == 0 {
		return
	}
	junk := bytes.Repeat([]byte{0x7f}, count*4)
	deadline := time.Now().Add(c.timeout)
	for _, peer := range c.peers.connected() {
		l := c.peers.linkIfAny(peer)
		h := transport.Header{Seq: 1, Kind: uint8(KindAllReduce), DType: uint8(Float32), Root: -1,
			Count: uint64(count), Epoch: c.epoch - 1}
		if err := l.Send(&h, junk, deadline); err != nil {
			c.logs.net.Warn(fmt.Sprintf("GONCCL_TEST_INJECT_STALE: sending rank %d a frame: %v", peer, err))
			continue
		}
		c.logs.net.Warn(fmt.Sprintf("GONCCL_TEST_INJECT_STALE: sent rank %d a %d-byte frame of generation (epoch) %d",
			peer, len(junk), c.epoch-1))
	}
}
