package core

import (
	"fmt"
	"os"

	"github.com/gonccl/gonccl/transport/shm"
)

// Zero-copy collectives. A buffer from goncclMemAlloc (torch's allocate_tensor) lies in a
// shared-memory region that every process on the host can map (shm.Region). When every
// rank's buffers of a collective lie in such regions, the ranks need not copy them
// through the rings: each maps its peers' buffers (once, cached) and reads and writes
// them where they lie (zerocopy_algos.go).
//
// The ranks must agree on taking this path, and a rank must not touch a peer's buffer
// before the peer has handed it over or after the peer has taken it back. An operation
// the path may take (zcCandidate: one host, GONCCL_ZEROCOPY, at least
// GONCCL_ZEROCOPY_THRESHOLD bytes, at most zcMaxRanks ranks: the same decision on
// every rank, made from what every rank knows) first asks what the communicator has
// learned of operations like it (zcSig: kind, type, count, op, root):
//
//   - learned "not ready" (some rank's buffer was ordinary memory last time): the
//     operation runs its usual algorithm at once, with no message of its own. Every
//     frame it sends carries transport.FlagZeroCopyReady while this rank, and every
//     rank whose frames it has received in this operation, could have run it
//     zero-copy. Every rank's result depends on every other rank's input (broadcast:
//     on the root's, the only buffer the path would read), so by the end every rank
//     has heard, through frames the algorithm sent anyway, from every rank that
//     matters, and learns the same verdict for the next operation like this one.
//   - learned "ready", or nothing yet: three steps, each message a frame over the
//     links of a binomial tree (gatherTree, broadcastTree: log2(n) rounds, and only
//     the tree's links), with the operation's header and algorithm "zerocopy":
//
//	1. describe   every rank's descriptor (zcDesc: for each of its buffers the
//	              region and offset it lies at, or "ordinary memory") is gathered
//	              up the tree to rank 0 and the whole set broadcast back down.
//	              Sending it hands the buffers over: the caller wrote its input
//	              before issuing the operation. Every rank decides from the same n
//	              descriptors, so all take the path or none does (then the
//	              operation runs its usual algorithm, and "not ready" is learned).
//	2. run        each rank maps what it needs of its peers' buffers and does its
//	              part: all_reduce reduces its shard of every rank's input (in rank
//	              order, so every rank's result is bit-identical) and writes it into
//	              every rank's output; reduce_scatter reduces its block into its own
//	              output; all_gather and broadcast copy what they need from the peers'
//	              inputs into their own output.
//	3. done       every rank's "finished with the peers' buffers" is gathered up the
//	              tree and a release sent back down (broadcast: gathered to the root
//	              only, which alone waits) before the operation completes: the caller
//	              may then reuse its buffers at once, and its output is whole.
//
// So a job whose buffers are ordinary memory pays one tree round per kind of
// operation, the first time, and nothing after; a job whose buffers are all gonccl's
// pays two tree rounds of small frames per operation, instead of copying its data
// through the rings. Deadlines, mismatched calls and dead peers are the links'
// business, as in any algorithm: the frames of steps 1 and 3 carry them.

// zcDescBytes is the size of one rank's descriptor on the wire.
const zcDescBytes = 128

// Frame offsets of the steps' messages (the header's Offset; Len tells them apart too).
const (
	zcOffDescribe = 0
	zcOffDone     = 1
)

// zcMaxMaps bounds the peers' regions a communicator keeps mapped.
const zcMaxMaps = 64

// zcMaxRanks is the most ranks among which an operation runs zero-copy: an all_reduce
// maps two buffers of every peer, so up to zcMaxRanks the regions one operation needs
// (2*(n-1)) fit the zcMaxMaps a communicator keeps; beyond it every operation would
// map and unmap, and the ranks' rings are as fast (see docs/performance.md).
const zcMaxRanks = 32

// zcChunkBytes is the piece a reduction works on at a time: small enough that the
// running result stays in cache while every rank's input is folded into it.
const zcChunkBytes = 64 << 10

// zcBufs are the buffers of one zero-copy operation, per rank, as mapped here
// (this rank's own are the caller's): nil where a rank's buffer is not used.
type zcBufs struct {
	send, recv [][]byte
}

// zcBytes is the size that decides whether an operation may run zero-copy (the
// same on every rank): the whole buffer of all_reduce and broadcast, every rank's
// blocks of all_gather and reduce_scatter.
func (c *Comm) zcBytes(o *op) (int, bool) {
	es := o.dtype.Size()
	switch o.kind {
	case KindAllReduce, KindBroadcast:
		return o.count * es, true
	case KindAllGather, KindReduceScatter:
		return c.nranks * o.count * es, true
	}
	return 0, false
}

// zcCandidate says whether o may run zero-copy: a decision every rank makes alike,
// from the settings (the same on every rank), the host layout (ranks in one pid
// namespace: a buffer is mapped through its owner's /proc/PID/fd) and the operation's
// kind and size.
func (c *Comm) zcCandidate(e *exec, o *op) bool {
	if c.cfg == nil || !c.cfg.zeroCopy || e.group != nil || c.nranks < 2 || c.nranks > zcMaxRanks ||
		len(c.hosts) != 1 || !c.peers.allShm() || !c.peers.onePidNamespace() {
		return false
	}
	n, ok := c.zcBytes(o)
	return ok && n > 0 && n >= c.cfg.zeroCopyMin
}

// zeroCopy runs o zero-copy if its ranks can, and reports whether it did; if not, the
// caller runs the algorithm it picked (whose check of the operation came first), and
// the communicator learns from its frames whether the next one like it can.
func (c *Comm) zeroCopy(e *exec, o *op) (bool, error) {
	if !c.zcCandidate(e, o) {
		return false, nil
	}
	z := c.zcState()
	if len(z.owed) > 0 {
		hdr := e.hdr
		e.hdr = z.owedHdr
		for _, p := range z.owed {
			if err := e.recv(p, zcOffDone, nil); err != nil {
				return true, err
			}
		}
		e.hdr, z.owed = hdr, nil
	}
	me := c.zcDescribe(o)
	sig := zcSigOf(o)
	if ready, known := z.learned.get(sig); known && !ready {
		e.zcLearn(sig, me.ready(o, c.rank))
		return false, nil
	}
	picked := e.hdr.Algo
	e.hdr.Algo = uint8(AlgoZeroCopy)
	z.asks++
	me.encode(z.mine)
	copy(z.all[c.rank*zcDescBytes:], z.mine)
	if err := e.gatherTree(zcOffDescribe, z.all, zcDescBytes, 0); err != nil {
		return true, err
	}
	if err := e.broadcastTree(z.all, 0); err != nil {
		return true, err
	}
	descs := make([]zcDesc, c.nranks)
	for p := range descs {
		var err error
		if descs[p], err = decodeZCDesc(z.all[p*zcDescBytes:]); err != nil {
			return true, fmt.Errorf("rank %d's zero-copy descriptor: %w", p, err)
		}
	}
	agreed := zcAgreed(descs, o)
	z.learned.put(sig, agreed)
	if !agreed {
		e.hdr.Algo = picked
		return false, nil
	}
	bufs, err := c.zcMap(o, descs)
	if err != nil {
		return true, err
	}
	if err := c.zcRun(e, o, bufs); err != nil {
		return true, err
	}
	return true, c.zcDone(e, o)
}

// zcUses says which of a rank's buffers the peers touch in o: send (all_reduce,
// all_gather, reduce_scatter: every rank's; broadcast: the root's) and recv
// (all_reduce: every rank's).
func zcUses(o *op, rank int) (send, recv bool) {
	switch o.kind {
	case KindAllReduce:
		return true, true
	case KindBroadcast:
		return rank == o.root, false
	}
	return true, false
}

// zcExtents are the bytes of send and recv that o uses on this rank (nil: none).
func (c *Comm) zcExtents(o *op) (send, recv []byte) {
	sendLen, recvLen := c.zcLens(o)
	switch {
	case o.kind == KindAllGather:
		recvLen *= c.nranks
	case o.kind == KindBroadcast && c.rank != o.root:
		sendLen = 0
	}
	if sendLen > 0 {
		send = o.send[:sendLen]
	}
	return send, o.recv[:recvLen]
}

// zcLens are the bytes of a rank's send and recv that o's peers touch (a broadcast's:
// the root's send).
func (c *Comm) zcLens(o *op) (send, recv int) {
	block := o.count * o.dtype.Size()
	switch o.kind {
	case KindAllReduce:
		return block, block
	case KindReduceScatter:
		return c.nranks * block, block
	}
	return block, block
}

// zcDescribe says where this rank's buffers of o lie. A buffer that overlaps the
// other one except in the operation's in-place layout is described as ordinary
// memory (the usual algorithms handle whatever the caller passes). It opens no link:
// zcCandidate has checked, from what every rank announced, that every peer is
// reached through shared memory.
func (c *Comm) zcDescribe(o *op) zcDesc {
	d := zcDesc{willing: true, pid: os.Getpid(), frees: shm.RegionsFreed()}
	send, recv := c.zcExtents(o)
	if !zcLayoutOK(o, c.rank, send, recv) {
		return d
	}
	useSend, useRecv := zcUses(o, c.rank)
	if useSend {
		d.send.ref, d.send.shared = shm.FindRegion(send)
	}
	if useRecv {
		d.recv.ref, d.recv.shared = shm.FindRegion(recv)
	}
	return d
}

// ready says whether d lets rank run o zero-copy: it can, and every buffer of its that
// a peer touches lies in a region.
func (d *zcDesc) ready(o *op, rank int) bool {
	useSend, useRecv := zcUses(o, rank)
	return d.willing && (!useSend || d.send.shared) && (!useRecv || d.recv.shared)
}

// zcLayoutOK says whether send and recv are apart, or overlap only as o's in-place
// form has them (all_reduce and broadcast: the same buffer; all_gather: send is this
// rank's block of recv; reduce_scatter: recv is this rank's block of send).
func zcLayoutOK(o *op, rank int, send, recv []byte) bool {
	if !overlaps(send, recv) {
		return true
	}
	same := func(a, b []byte) bool { return len(a) == len(b) && &a[0] == &b[0] }
	switch o.kind {
	case KindAllReduce, KindBroadcast:
		return same(send, recv)
	case KindAllGather:
		return same(send, recv[rank*len(send):(rank+1)*len(send)])
	case KindReduceScatter:
		return same(recv, send[rank*len(recv):(rank+1)*len(recv)])
	}
	return false
}

// zcAgreed decides, from every rank's descriptor, whether o runs zero-copy: every rank
// is ready (zcDesc.ready).
func zcAgreed(descs []zcDesc, o *op) bool {
	for p := range descs {
		if !descs[p].ready(o, p) {
			return false
		}
	}
	return true
}

// zcDone is step 3: this rank is finished with its peers' buffers; it returns once
// the peers are finished with its own. Every rank's "done" is gathered up a binomial
// tree, and (but for broadcast, whose root alone waits) a release sent back down.
func (c *Comm) zcDone(e *exec, o *op) error {
	root := 0
	if o.kind == KindBroadcast {
		root = o.root
	}
	if c.cfg.zeroCopyFault == "skip-done" {
		// Send this rank's done messages without waiting for anyone's: every peer
		// whose done this rank would have received is owed, and the next operation
		// receives them first.
		// (Every rank commits the fault, so no rank sends a release, and none is owed.)
		c.zc.owed, c.zc.owedHdr = e.treeChildren(root), e.hdr
		if p, ok := e.treeParent(root); ok {
			return e.send(p, zcOffDone, nil)
		}
		return nil
	}
	if err := e.gatherTree(zcOffDone, nil, 0, root); err != nil {
		return err
	}
	if o.kind == KindBroadcast {
		return nil
	}
	return e.broadcastTree(nil, root)
}
