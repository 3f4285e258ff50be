package core

import (
	"fmt"
	"os"
	"sync"

	"github.com/gonccl/gonccl/transport/shm"
)

// Zero-copy collectives. A buffer from goncclMemAlloc (torch's allocate_tensor) lies in a
// shared-memory region that every process on the host can map (shm.Region). When every
// rank's buffers of a collective lie in such regions, the ranks need not copy them
// through the rings: each maps its peers' buffers (once, cached) and reads and writes
// them where they lie (zerocopy_algos.go).
//
// The ranks must agree on taking this path, and a rank must not touch a peer's buffer
// before the peer has handed it over or after the peer has taken it back. So an
// operation the path may take (one host, GONCCL_ZEROCOPY, at least
// GONCCL_ZEROCOPY_THRESHOLD bytes: the same decision on every rank, made from what
// every rank knows) runs in three steps, each message a frame over the links with the
// operation's header and algorithm "zerocopy":
//
//	1. describe   every rank sends every peer a descriptor (zcDesc): whether it can
//	              take the path (its links are all shared memory) and, for each of
//	              its buffers, the region and offset it lies at (or "ordinary
//	              memory"). Sending it hands the buffers over: the caller wrote its
//	              input before issuing the operation. Every rank decides from the
//	              same n descriptors, so all take the path or none does (then the
//	              operation runs its usual algorithm).
//	2. run        each rank maps what it needs of its peers' buffers and does its
//	              part: all_reduce reduces its shard of every rank's input (in rank
//	              order, so every rank's result is bit-identical) and writes it into
//	              every rank's output; reduce_scatter reduces its block into its own
//	              output; all_gather and broadcast copy what they need from the peers'
//	              inputs into their own output.
//	3. done       every rank tells every peer it is finished with the peer's buffers
//	              and waits until every peer has said so (broadcast: only the root
//	              waits, for every other rank) before the operation completes: the
//	              caller may then reuse its buffers at once, and its output is
//	              whole.
//
// Deadlines, mismatched calls and dead peers are the links' business, as in any
// algorithm: the frames of steps 1 and 3 carry them.

// zcDescBytes is the size of one rank's descriptor on the wire.
const zcDescBytes = 128

// Frame offsets of the steps' messages (the header's Offset; Len tells them apart too).
const (
	zcOffDescribe = 0
	zcOffDone     = 1
)

// zcMaxMaps bounds the peers' regions a communicator keeps mapped.
const zcMaxMaps = 64

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

// zcCandidate says whether o asks its ranks whether they can run it zero-copy: a
// decision every rank makes alike, from the settings (the same on every rank), the
// host layout and the operation's kind and size.
func (c *Comm) zcCandidate(e *exec, o *op) bool {
	if c.cfg == nil || !c.cfg.zeroCopy || e.group != nil || c.nranks < 2 || len(c.hosts) != 1 {
		return false
	}
	n, ok := c.zcBytes(o)
	return ok && n > 0 && n >= c.cfg.zeroCopyMin
}

// zeroCopy runs o zero-copy if its ranks can, and reports whether it did; if not, the
// caller runs the algorithm it picked (whose check of the operation came first).
func (c *Comm) zeroCopy(e *exec, o *op) (bool, error) {
	if !c.zcCandidate(e, o) {
		return false, nil
	}
	z := c.zcState()
	picked := e.hdr.Algo
	e.hdr.Algo = uint8(AlgoZeroCopy)
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
	me, err := c.zcDescribe(e, o)
	if err != nil {
		return true, err
	}
	me.encode(z.mine)
	if err := e.zcGather(zcOffDescribe, z.mine, z.all); err != nil {
		return true, err
	}
	descs := make([]zcDesc, c.nranks)
	for p := range descs {
		if descs[p], err = decodeZCDesc(z.all[p*zcDescBytes:]); err != nil {
			return true, fmt.Errorf("rank %d's zero-copy descriptor: %w", p, err)
		}
	}
	if !zcAgreed(descs, o) {
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
// memory (the usual algorithms handle whatever the caller passes).
func (c *Comm) zcDescribe(e *exec, o *op) (zcDesc, error) {
	d := zcDesc{willing: true, pid: os.Getpid(), frees: shm.RegionsFreed()}
	for p := 0; p < c.nranks; p++ {
		if p == c.rank {
			continue
		}
		l, err := e.link(p)
		if err != nil {
			return d, e.linkErr(p, err)
		}
		if _, ok := l.(*shm.Link); !ok {
			d.willing = false
		}
	}
	send, recv := c.zcExtents(o)
	if !zcLayoutOK(o, c.rank, send, recv) {
		return d, nil
	}
	useSend, useRecv := zcUses(o, c.rank)
	if useSend {
		d.send.ref, d.send.shared = shm.FindRegion(send)
	}
	if useRecv {
		d.recv.ref, d.recv.shared = shm.FindRegion(recv)
	}
	return d, nil
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
// can, and every buffer a peer touches lies in a region.
func zcAgreed(descs []zcDesc, o *op) bool {
	for p, d := range descs {
		useSend, useRecv := zcUses(o, p)
		if !d.willing || useSend && !d.send.shared || useRecv && !d.recv.shared {
			return false
		}
	}
	return true
}

// zcGather sends p to every peer (at frame offset off) and receives every peer's
// into its slot of all (this rank's own included): the describe and done steps.
func (e *exec) zcGather(off int, p, all []byte) error {
	var wg sync.WaitGroup
	defer e.joinOnPanic(nil, &wg)
	e.sendToAll(&wg, off, p)
	if all != nil {
		copy(all[e.rank*len(p):], p)
	}
	for i := 1; i < e.nranks && e.result() == nil; i++ {
		j := mod(e.rank-i, e.nranks)
		var slot []byte
		if all != nil {
			slot = all[j*len(p) : (j+1)*len(p)]
		}
		if err := e.recv(j, off, slot); err != nil {
			e.fail(err)
		}
	}
	wg.Wait()
	return e.result()
}

// zcDone is step 3: this rank is finished with its peers' buffers; it returns once
// the peers are finished with its own (broadcast: the root waits for all the others,
// and they for nobody).
func (c *Comm) zcDone(e *exec, o *op) error {
	var from []int // the ranks this rank waits for
	if o.kind != KindBroadcast || c.rank == o.root {
		for p := 0; p < c.nranks; p++ {
			if p != c.rank {
				from = append(from, p)
			}
		}
	}
	if c.cfg.zeroCopyFault == "skip-done" {
		if err := e.zcSendDone(o); err != nil {
			return err
		}
		c.zc.owed, c.zc.owedHdr = from, e.hdr
		return nil
	}
	switch {
	case o.kind != KindBroadcast:
		return e.zcGather(zcOffDone, nil, nil)
	case c.rank != o.root:
		return e.send(o.root, zcOffDone, nil)
	}
	for _, p := range from {
		if err := e.recv(p, zcOffDone, nil); err != nil {
			return err
		}
	}
	return nil
}

// zcSendDone sends the done messages alone (the skip-done fault).
func (e *exec) zcSendDone(o *op) error {
	if o.kind == KindBroadcast {
		if e.rank != o.root {
			return e.send(o.root, zcOffDone, nil)
		}
		return nil
	}
	for i := 1; i < e.nranks; i++ {
		if err := e.send(mod(e.rank+i, e.nranks), zcOffDone, nil); err != nil {
			return err
		}
	}
	return nil
}
