package samegpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/reduce"
)

func closeFD(fd int) error { return unix.Close(fd) }

// sameOp is an operation of the same-GPU path as the ranks compare it.
type sameOp struct {
	kind  uint32 // sameAllReduce, ...
	dt    reduce.DataType
	op    reduce.RedOp
	root  int
	count int
}

const (
	sameAllReduce = iota + 1
	sameAllGather
	sameReduceScatter
	sameBroadcast
)

var sameNames = map[uint32]string{sameAllReduce: "all_reduce", sameAllGather: "all_gather",
	sameReduceScatter: "reduce_scatter", sameBroadcast: "broadcast"}

func (o sameOp) put(p []byte) {
	binary.LittleEndian.PutUint32(p[0:], o.kind)
	binary.LittleEndian.PutUint32(p[4:], uint32(o.dt))
	binary.LittleEndian.PutUint32(p[8:], uint32(o.op))
	binary.LittleEndian.PutUint32(p[12:], uint32(int32(o.root)))
	binary.LittleEndian.PutUint64(p[16:], uint64(o.count))
}

func getSameOp(p []byte) sameOp {
	return sameOp{kind: binary.LittleEndian.Uint32(p[0:]), dt: reduce.DataType(binary.LittleEndian.Uint32(p[4:])),
		op: reduce.RedOp(binary.LittleEndian.Uint32(p[8:])), root: int(int32(binary.LittleEndian.Uint32(p[12:]))),
		count: int(binary.LittleEndian.Uint64(p[16:]))}
}

// AllReduce runs recv = the reduction of every rank's send over the ranks, with s the
// caller's stream: one launch of a one-pass kernel when k has them (Kernels.ReduceMany)
// and there are at most kernels.MaxReduceOperands ranks. It returns once this rank's
// part is on its stream, before any of the operation's GPU work has run: the
// launcher's kernels wait on its stream for the other ranks' streams, and the other
// ranks' streams for the kernels (overlap.go). send and recv may be the same buffer.
func (g *SameGPU) AllReduce(s driver.Stream, k kernels.Reducer, send, recv uintptr, count int, dt reduce.DataType, op reduce.RedOp) error {
	n := count * dt.Size()
	return g.run(s, sameOp{kind: sameAllReduce, dt: dt, op: op, count: count}, send, n, recv, n, func(ins, outs []uintptr) error {
		return g.enqueueAllReduce(s, k, ins, outs, n, count, dt, op)
	})
}

// AllGather runs recv[r*bytes:(r+1)*bytes] = rank r's send of bytes, on every rank. send
// may be recv's own block.
func (g *SameGPU) AllGather(s driver.Stream, send, recv uintptr, bytes int) error {
	return g.run(s, sameOp{kind: sameAllGather, count: bytes}, send, bytes, recv, bytes*g.nranks, func(ins, outs []uintptr) error {
		for p := range g.nranks {
			for q := range g.nranks {
				if dst := outs[p] + uintptr(q*bytes); dst != ins[q] {
					if err := g.d.MemcpyDtoD(dst, ins[q], bytes, s); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
}

// ReduceScatter runs recv = the reduction over the ranks of their send's block r (count
// elements each) on rank r. recv may be send's own block. With the one-pass kernels it
// is one launch per rank, each reading that rank's block of every input once.
func (g *SameGPU) ReduceScatter(s driver.Stream, k kernels.Reducer, send, recv uintptr, count int, dt reduce.DataType, op reduce.RedOp) error {
	n := count * dt.Size()
	return g.run(s, sameOp{kind: sameReduceScatter, dt: dt, op: op, count: count}, send, n*g.nranks, recv, n, func(ins, outs []uintptr) error {
		if mr, ok := g.onePass(k); ok {
			// Per rank p one pass: its block of every rank's input in, its output out.
			blocks := make([]uintptr, g.nranks)
			for p := range g.nranks {
				for q := range g.nranks {
					blocks[q] = ins[q] + uintptr(p*n)
				}
				if err := mr.ReduceMany(s, outs[p:p+1], blocks, count, dt, op); err != nil {
					return err
				}
			}
			return nil
		}
		for p := range g.nranks {
			// Rank p's own block first: its output may be that very block.
			block := uintptr(p * n)
			if outs[p] != ins[p]+block {
				if err := g.d.MemcpyDtoD(outs[p], ins[p]+block, n, s); err != nil {
					return err
				}
			}
			for q := range g.nranks {
				if q == p {
					continue
				}
				if err := k.ReduceInto(s, outs[p], ins[q]+block, count, dt, op); err != nil {
					return err
				}
			}
			if op == reduce.Avg {
				if err := k.DivideBy(s, outs[p], count, dt, g.nranks); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Broadcast runs recv = root's send of bytes, on every rank (send is read on the root
// only, and may be its recv).
func (g *SameGPU) Broadcast(s driver.Stream, send, recv uintptr, bytes, root int) error {
	if root < 0 || root >= g.nranks {
		return fmt.Errorf("cuda: same-GPU broadcast: root %d is not a rank of %d", root, g.nranks)
	}
	sendBytes := 0
	if g.rank == root {
		sendBytes = bytes
	}
	return g.run(s, sameOp{kind: sameBroadcast, root: root, count: bytes}, send, sendBytes, recv, bytes, func(ins, outs []uintptr) error {
		for p := range g.nranks {
			if outs[p] != ins[root] {
				if err := g.d.MemcpyDtoD(outs[p], ins[root], bytes, s); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// run is one operation of the protocol (see SameGPU): this rank's send (sendBytes, 0
// if it has none) and recv (recvBytes); enqueue puts the launcher's work on s given
// every rank's buffers as the launcher addresses them.
func (g *SameGPU) run(s driver.Stream, o sameOp, send uintptr, sendBytes int, recv uintptr, recvBytes int, enqueue func(ins, outs []uintptr) error) error {
	if recvBytes == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return fmt.Errorf("cuda: the same-GPU path is closed")
	}
	if g.failed == nil {
		if err := g.watchErr(); err != nil {
			g.failed = fmt.Errorf("cuda: same-GPU operations on the GPU were released without their inputs: %w", err)
		}
	}
	if g.failed != nil {
		return fmt.Errorf("cuda: the same-GPU path failed earlier, and its ranks may no longer agree on which operation is which: %w", g.failed)
	}
	g.n++
	n := g.n
	deadline := time.Now().Add(g.timeout)
	err := g.d.Do(g.ctx, func() error {
		if g.rank != launcher {
			return g.follow(s, n, deadline, o, send, sendBytes, recv, recvBytes)
		}
		return g.lead(s, n, deadline, o, send, sendBytes, recv, recvBytes, enqueue)
	})
	if err != nil && !errors.Is(err, ErrSameGPUMismatch) {
		// A mismatch is seen by every rank in the same operation, so their sequence
		// numbers still agree; any other failure may have left them apart.
		g.failed = err
	}
	return err
}

// growExchange makes the exchange buffer hold at least n bytes (at least twice its
// old size, so it grows a few times at most). The buffer is memory peers map from a
// file descriptor (cuda.ExportMem), which outlives this rank: if it dies, the
// launcher's queued kernels still read and write memory that is there. It runs on this
// rank's thread before the rank publishes anything for the operation: the launcher
// learns of the new buffer from this operation's description, and releases its
// mapping of the old one once its stream has run the last operation that used it
// (evict); this rank's stream may still copy out of the old one, which it stops
// serving now and unmaps at Close.
func (g *SameGPU) growExchange(n int) error {
	if g.xcap >= n {
		return nil
	}
	c := max(n, 2*g.xcap, 1<<20)
	m, err := cuda.ExportMem(g.d, g.dev, c, "samegpu-xbuf")
	if err != nil {
		return err
	}
	if g.xmem != nil {
		g.xmem.StopServing()
		g.retired = append(g.retired, g.xmem)
	}
	g.xid++
	g.xmem, g.xbuf, g.xcap = m, m.Ptr, m.Size
	return nil
}

// xAlign is the alignment, in bytes, that staging keeps: a buffer's place in the
// exchange buffer has its address's remainder modulo xAlign, so the kernels see the
// caller's alignment (their vector loads depend on it).
const xAlign = 256

// stageLayout places this rank's send (sendBytes, 0 if none) and recv (recvBytes) in
// the exchange buffer: their offsets there, and the bytes the two take. Buffers that
// overlap keep their places relative to each other (an all_reduce in place stays in
// place, an all_gather's input stays its output's block), so the launcher's kernels
// see the aliasing the caller made; apart, recv follows send.
func stageLayout(send uintptr, sendBytes int, recv uintptr, recvBytes int) (inOff, outOff, total int) {
	if sendBytes == 0 {
		outOff = int(recv % xAlign)
		return 0, outOff, outOff + recvBytes
	}
	if send < recv+uintptr(recvBytes) && recv < send+uintptr(sendBytes) {
		lo, hi := min(send, recv), max(send+uintptr(sendBytes), recv+uintptr(recvBytes))
		at := int(lo % xAlign)
		return at + int(send-lo), at + int(recv-lo), at + int(hi-lo)
	}
	inOff = int(send % xAlign)
	outOff = (inOff+sendBytes+xAlign-1)/xAlign*xAlign + int(recv%xAlign)
	return inOff, outOff, outOff + recvBytes
}

// xbufID marks the ids of exchange buffers in their descriptors (the rest is the
// rank's count of exchange buffers it made), apart from a rank's buffers described as
// they are (id 0), which only a launcher of the same process takes.
const xbufID = 1 << 63

// exportExchange describes the exchange buffer for the launcher.
func (g *SameGPU) exportExchange() bufDesc {
	return bufDesc{id: xbufID | g.xid, base: g.xbuf, size: g.xcap, handle: g.xmem.Handle}
}

// follow is a rank's part other than the launcher's. A rank of the launcher's
// process describes its buffers as they are. A rank of another process stages: its
// input is copied into its exchange buffer and its output out of it, on its own
// stream, so that the launcher reads and writes only memory that outlives this rank
// (with a mapping of the caller's own buffer, a queued kernel of the launcher would
// fault on it once this process died or its allocator freed the buffer).
func (g *SameGPU) follow(s driver.Stream, n uint64, deadline time.Time, o sameOp, send uintptr, sendBytes int, recv uintptr, recvBytes int) error {
	in := bufDesc{base: send, size: sendBytes}
	out := bufDesc{base: recv, size: recvBytes}
	staged := !g.samePID[launcher]
	var inOff, outOff int
	if staged {
		// Described first: a failure comes before anything is published, and the
		// launcher times out naming this rank.
		var total int
		inOff, outOff, total = stageLayout(send, sendBytes, recv, recvBytes)
		if err := g.growExchange(total); err != nil {
			return fmt.Errorf("cuda: same-GPU %s on rank %d: %w", sameNames[o.kind], g.rank, err)
		}
		in, out = g.exportExchange(), g.exportExchange()
		in.off, out.off = inOff, outOff
		if err := g.exchangeFree(s, n, deadline); err != nil {
			return err
		}
		if sendBytes > 0 {
			if err := g.d.MemcpyDtoD(g.xbuf+uintptr(inOff), send, sendBytes, s); err != nil {
				return err
			}
		}
	}
	if err := g.slotFree(n, deadline); err != nil {
		return err
	}
	lead := g.peers[launcher]
	if err := g.d.StreamWriteValue32(s, lead.dev+uintptr(arriveAt(g.rank, n)), uint32(n)); err != nil {
		return err
	}
	o.put(g.own.mem[seqDesc:])
	in.put(g.own.mem[seqIn:])
	out.put(g.own.mem[seqOut:])
	g.own.word(seqReady).Store(n)

	if err := g.wait(deadline, func() string {
		return fmt.Sprintf("rank %d waited for rank %d to enqueue same-GPU %s %d", g.rank, launcher, sameNames[o.kind], n)
	}, func() (bool, error) { return lead.word(seqDone).Load() >= n, nil }); err != nil {
		return err
	}
	if st := lead.word(seqStatus).Load(); st == statusMismatch {
		g.own.word32(doneAt(n)).Store(uint32(n)) // nothing of it is on the stream
		return fmt.Errorf("%w: same-GPU %s %d: rank %d reports that the ranks called different operations, or could not enqueue this one", ErrSameGPUMismatch, sameNames[o.kind], n, launcher)
	}
	// The rest is stream-ordered: the launcher's stream says when its kernels have run.
	if err := g.d.StreamWaitValue32(s, g.own.dev+uintptr(goAt(n)), uint32(n)); err != nil {
		return err
	}
	if staged {
		if err := g.d.MemcpyDtoD(recv, g.xbuf+uintptr(outOff), recvBytes, s); err != nil {
			return err
		}
	}
	if err := g.d.StreamWriteValue32(s, g.own.dev+uintptr(doneAt(n)), uint32(n)); err != nil {
		return err
	}
	g.enqueued(n)
	return nil
}

// lead is the launcher's part: it waits on the host for every peer's description of
// its buffers, then enqueues the whole operation on its own stream, behind waits for
// every peer's stream to reach it (overlap.go).
func (g *SameGPU) lead(s driver.Stream, n uint64, deadline time.Time, o sameOp, send uintptr, sendBytes int, recv uintptr, recvBytes int, enqueue func(ins, outs []uintptr) error) error {
	ins := make([]uintptr, g.nranks)
	outs := make([]uintptr, g.nranks)
	ins[g.rank], outs[g.rank] = send, recv
	name := sameNames[o.kind]
	mismatch := -1
	for p := range g.nranks {
		if p == g.rank {
			continue
		}
		pg := g.peers[p]
		if err := g.wait(deadline, func() string {
			return fmt.Sprintf("rank %d waited for rank %d's input of same-GPU %s %d", g.rank, p, name, n)
		}, func() (bool, error) { return pg.word(seqReady).Load() >= n, nil }); err != nil {
			return err
		}
		if getSameOp(pg.mem[seqDesc:]) != o {
			if mismatch < 0 {
				mismatch = p // the first rank that differs is named
			}
			continue
		}
		var err error
		if psend := peerSendBytes(o, p, sendBytes); psend > 0 {
			if ins[p], err = g.peerPtr(p, getBufDesc(pg.mem[seqIn:]), psend); err != nil {
				return err
			}
		}
		if outs[p], err = g.peerPtr(p, getBufDesc(pg.mem[seqOut:]), recvBytes); err != nil {
			return err
		}
	}
	if err := g.slotFree(n, deadline); err != nil {
		return err
	}
	if mismatch >= 0 {
		g.own.word32(doneAt(n)).Store(uint32(n)) // nothing of it is on the stream
		g.own.word(seqStatus).Store(statusMismatch)
		g.own.word(seqDone).Store(n)
		return fmt.Errorf("%w: same-GPU %s %d: rank %d called another operation than rank %d (collective, count, type, reduction or root)", ErrSameGPUMismatch, name, n, mismatch, g.rank)
	}
	err := g.evict(n)
	if err == nil && !driver.TestFault("samegpu-skip-stream-wait") {
		// Each follower's stream has run up to the operation: its input is in place,
		// and it no longer uses its output.
		for p := range g.nranks {
			if p != g.rank && err == nil {
				err = g.d.StreamWaitValue32(s, g.own.dev+uintptr(arriveAt(p, n)), uint32(n))
			}
		}
	}
	if err == nil {
		err = enqueue(ins, outs)
	}
	if err == nil {
		for p := range g.nranks {
			if p != g.rank && err == nil {
				err = g.d.StreamWriteValue32(s, g.peers[p].dev+uintptr(goAt(n)), uint32(n))
			}
		}
	}
	if err == nil {
		err = g.d.StreamWriteValue32(s, g.own.dev+uintptr(doneAt(n)), uint32(n))
	}
	if err == nil {
		g.enqueued(n)
	}
	if err != nil {
		// The peers must not take the outputs for a result: the work may be
		// half-enqueued. They see the failure as a mismatch of this operation.
		g.own.word(seqStatus).Store(statusMismatch)
		g.own.word(seqDone).Store(n)
		return err
	}
	g.own.word(seqStatus).Store(0)
	g.own.word(seqDone).Store(n)
	return nil
}

// peerSendBytes is the size of rank p's send in operation o, given the launcher's.
func peerSendBytes(o sameOp, p, launcherSend int) int {
	if o.kind == sameBroadcast {
		if p == o.root {
			return o.count
		}
		return 0
	}
	return launcherSend
}

// manyReducer is a Reducer that also has the one-pass kernels (*Kernels does).
type manyReducer interface {
	ReduceMany(s driver.Stream, outs, ins []uintptr, count int, dt reduce.DataType, op reduce.RedOp) error
}

// onePass returns k's one-pass kernels if it has them and they take this many ranks.
func (g *SameGPU) onePass(k kernels.Reducer) (manyReducer, bool) {
	mr, ok := k.(manyReducer)
	return mr, ok && g.nranks <= kernels.MaxReduceOperands
}

// enqueueAllReduce puts the operation's work on s. With the one-pass kernels it is one
// launch that reads every rank's input once and writes every rank's output once: 2NS
// bytes of memory traffic for N ranks and S bytes. Otherwise (more ranks than one
// launch takes, or a Reducer without them) it is composed from the two-operand
// kernels: the launcher's output gets its own input, then every peer's input folded
// in, rank order; then every peer's output gets a copy of it: (5N-3)S bytes.
func (g *SameGPU) enqueueAllReduce(s driver.Stream, k kernels.Reducer, ins, outs []uintptr, bytes, count int, dt reduce.DataType, op reduce.RedOp) error {
	if mr, ok := g.onePass(k); ok {
		if driver.TestFault("samegpu-offset") {
			// Read the last rank's input one element late (and one element fewer).
			last := len(ins) - 1
			ins = append([]uintptr(nil), ins...)
			ins[last] += uintptr(dt.Size())
			count--
		}
		return mr.ReduceMany(s, outs, ins, count, dt, op)
	}
	me := g.rank
	if ins[me] != outs[me] {
		if err := g.d.MemcpyDtoD(outs[me], ins[me], bytes, s); err != nil {
			return err
		}
	}
	for p := range g.nranks {
		if p == me {
			continue
		}
		src := ins[p]
		if driver.TestFault("samegpu-offset") && p == g.nranks-1 {
			src += uintptr(dt.Size())
			count--
		}
		if err := k.ReduceInto(s, outs[me], src, count, dt, op); err != nil {
			return err
		}
	}
	if op == reduce.Avg {
		if err := k.DivideBy(s, outs[me], count, dt, g.nranks); err != nil {
			return err
		}
	}
	for p := range g.nranks {
		if p != me && outs[p] != outs[me] {
			if err := g.d.MemcpyDtoD(outs[p], outs[me], bytes, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// peerPtr is rank p's buffer described by b (bytes long) as this process addresses
// it: as it is for a rank of this process, else in the rank's exchange buffer, mapped
// on first use. A rank's new exchange buffer (it grew) retires the mappings of its old
// ones, released once the operations that used them have run (evict).
func (g *SameGPU) peerPtr(p int, b bufDesc, bytes int) (uintptr, error) {
	if b.off < 0 || b.off+bytes > b.size {
		return 0, fmt.Errorf("cuda: rank %d's same-GPU buffer (%d bytes at offset %d) lies outside its buffer of %d bytes", p, bytes, b.off, b.size)
	}
	if g.samePID[p] {
		return b.base + uintptr(b.off), nil
	}
	m := g.maps[p]
	if mp, ok := m[b.id]; ok {
		mp.used = g.n
		m[b.id] = mp
		return mp.here + uintptr(b.off), nil
	}
	// Only exchange buffers: memory that stays until this mapping goes, whatever
	// becomes of its maker.
	if !cuda.IsSharedMem(b.handle) || b.id&xbufID == 0 {
		return 0, fmt.Errorf("cuda: rank %d's same-GPU buffer is not an exchange buffer shared as a file descriptor", p)
	}
	if cuda.SharedMemSize(b.handle) != b.size {
		return 0, fmt.Errorf("cuda: rank %d's same-GPU exchange buffer has %d bytes, its handle says %d", p, b.size, cuda.SharedMemSize(b.handle))
	}
	here, _, err := cuda.ImportMem(g.d, g.dev, b.handle)
	if err != nil {
		return 0, fmt.Errorf("cuda: mapping rank %d's exchange buffer for the same-GPU path: %w", p, err)
	}
	for id, mp := range m {
		mp.retired = true // the rank serves one exchange buffer at a time
		m[id] = mp
	}
	m[b.id] = mapping{size: b.size, here: here, used: g.n}
	return here + uintptr(b.off), nil
}

// unmap releases a mapping of a peer's exchange buffer made here.
func (g *SameGPU) unmap(mp mapping) error {
	return g.d.MemUnmapShared(mp.here, mp.size)
}

// evict releases the mappings of peers' retired exchange buffers, and for each peer
// with more than maxMappings mapped any operation n does not use, once their last
// operation has run on the launcher's stream (the calls return before their kernels
// run, so an earlier operation's kernels may still use one).
func (g *SameGPU) evict(n uint64) error {
	for _, m := range g.maps {
		for id, mp := range m {
			if !mp.retired && len(m) <= maxMappings {
				continue
			}
			if mp.used == n || !g.own.done(mp.used, g.sync.enqueued.Load()) {
				continue
			}
			if err := g.unmap(mp); err != nil {
				return err
			}
			delete(m, id)
		}
	}
	return nil
}
