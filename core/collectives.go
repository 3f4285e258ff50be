package core

import (
	"math"

	"github.com/gonccl/gonccl/internal/reduce"
)

// The public operations. Each checks its arguments, enqueues the operation and returns
// a Request at once; the executor runs operations in issue order. Buffers are the
// caller's memory and must stay valid, and unmodified by the caller, until the request
// completes. send and recv may be the same buffer (in place).

// AllReduce reduces count elements of send across all ranks with redop and leaves the
// result, identical on every rank, in recv.
func (c *Comm) AllReduce(send, recv []byte, count int, dt DataType, redop RedOp, opts ...OpOption) (*Request, error) {
	if err := checkReduce(KindAllReduce, dt, redop); err != nil {
		return nil, err
	}
	if err := checkBuffers(KindAllReduce, dt, count, send, count, recv, count); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindAllReduce, send: send, recv: recv, count: count, dtype: dt, redop: redop, root: -1}, opts...)
}

// Broadcast copies count elements of send on root into recv on every rank. send is
// read only on the root.
func (c *Comm) Broadcast(send, recv []byte, count int, dt DataType, root int, opts ...OpOption) (*Request, error) {
	if err := checkType(KindBroadcast, dt); err != nil {
		return nil, err
	}
	if root < 0 || root >= c.nranks {
		return nil, invalidf("broadcast: root %d is out of range for %d ranks", root, c.nranks)
	}
	sendCount := count
	if c.rank != root {
		sendCount = 0
	}
	if err := checkBuffers(KindBroadcast, dt, count, send, sendCount, recv, count); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindBroadcast, send: send, recv: recv, count: count, dtype: dt, root: root}, opts...)
}

// AllGather gathers sendCount elements from every rank into recv, rank i's at element
// offset i*sendCount. In place: send is recv's own block.
func (c *Comm) AllGather(send, recv []byte, sendCount int, dt DataType, opts ...OpOption) (*Request, error) {
	if err := checkType(KindAllGather, dt); err != nil {
		return nil, err
	}
	total, err := c.perRankTotal(KindAllGather, sendCount)
	if err != nil {
		return nil, err
	}
	if err := checkBuffers(KindAllGather, dt, sendCount, send, sendCount, recv, total); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindAllGather, send: send, recv: recv, count: sendCount, dtype: dt, root: -1}, opts...)
}

// Barrier completes once every rank has called Barrier.
func (c *Comm) Barrier(opts ...OpOption) (*Request, error) {
	return c.enqueue(&op{kind: KindBarrier, root: -1}, opts...)
}

func checkType(k Kind, dt DataType) error {
	if !dt.Valid() {
		return invalidf("%s: unknown data type %d", k, uint8(dt))
	}
	return nil
}

// checkReduce rejects the (dt, redop) pairs that CheckReduction does, naming k.
func checkReduce(k Kind, dt DataType, redop RedOp) error {
	return reduce.Check(k.String(), dt, redop)
}

// checkBuffers checks count and that send and recv hold sendCount and recvCount
// elements of dt, without overflow: a byte size that wrapped around would pass a plain
// comparison and then fail (or read out of bounds) deep inside an algorithm.
func checkBuffers(k Kind, dt DataType, count int, send []byte, sendCount int, recv []byte, recvCount int) error {
	es := dt.Size()
	if count < 0 {
		return invalidf("%s: negative count %d", k, count)
	}
	for _, n := range []int{count, sendCount, recvCount} {
		if err := checkByteSize(k.String(), n, dt); err != nil {
			return err
		}
	}
	if len(send) < sendCount*es {
		return invalidf("%s: send buffer holds %d bytes, need %d (%d x %s)", k, len(send), sendCount*es, sendCount, dt)
	}
	if len(recv) < recvCount*es {
		return invalidf("%s: receive buffer holds %d bytes, need %d (%d x %s)", k, len(recv), recvCount*es, recvCount, dt)
	}
	return nil
}

// Reduce reduces count elements of send across all ranks with redop and leaves the
// result in recv on root. recv is neither read nor written on the other ranks (it
// may be nil there), and send is never written.
func (c *Comm) Reduce(send, recv []byte, count int, dt DataType, redop RedOp, root int, opts ...OpOption) (*Request, error) {
	if err := checkReduce(KindReduce, dt, redop); err != nil {
		return nil, err
	}
	if err := c.checkRoot(KindReduce, root); err != nil {
		return nil, err
	}
	recvCount := 0
	if c.rank == root {
		recvCount = count
	}
	if err := checkBuffers(KindReduce, dt, count, send, count, recv, recvCount); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindReduce, send: send, recv: recv, count: count, dtype: dt, redop: redop, root: root}, opts...)
}

// ReduceScatter reduces nranks*recvCount elements of send across all ranks with
// redop; rank i receives block i (recvCount elements) of the result in recv. In
// place: recv is send's block rank. send is never written unless recv is in it.
func (c *Comm) ReduceScatter(send, recv []byte, recvCount int, dt DataType, redop RedOp, opts ...OpOption) (*Request, error) {
	if err := checkReduce(KindReduceScatter, dt, redop); err != nil {
		return nil, err
	}
	total, err := c.perRankTotal(KindReduceScatter, recvCount)
	if err != nil {
		return nil, err
	}
	if err := checkBuffers(KindReduceScatter, dt, recvCount, send, total, recv, recvCount); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindReduceScatter, send: send, recv: recv, count: recvCount, dtype: dt, redop: redop, root: -1}, opts...)
}

// Gather collects count elements of send from every rank into recv on root, rank
// i's at element offset i*count. recv is used only on root. In place: root's send is
// its own block of recv.
func (c *Comm) Gather(send, recv []byte, count int, dt DataType, root int, opts ...OpOption) (*Request, error) {
	if err := checkType(KindGather, dt); err != nil {
		return nil, err
	}
	if err := c.checkRoot(KindGather, root); err != nil {
		return nil, err
	}
	recvCount := 0
	if c.rank == root {
		var err error
		if recvCount, err = c.perRankTotal(KindGather, count); err != nil {
			return nil, err
		}
	}
	if err := checkBuffers(KindGather, dt, count, send, count, recv, recvCount); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindGather, send: send, recv: recv, count: count, dtype: dt, root: root}, opts...)
}

// Scatter sends block i (count elements at element offset i*count of send on root)
// to rank i's recv. send is used only on root. In place: root's recv is its own
// block of send.
func (c *Comm) Scatter(send, recv []byte, count int, dt DataType, root int, opts ...OpOption) (*Request, error) {
	if err := checkType(KindScatter, dt); err != nil {
		return nil, err
	}
	if err := c.checkRoot(KindScatter, root); err != nil {
		return nil, err
	}
	sendCount := 0
	if c.rank == root {
		var err error
		if sendCount, err = c.perRankTotal(KindScatter, count); err != nil {
			return nil, err
		}
	}
	if err := checkBuffers(KindScatter, dt, count, send, sendCount, recv, count); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindScatter, send: send, recv: recv, count: count, dtype: dt, root: root}, opts...)
}

// AlltoAll sends block j (count elements at element offset j*count of send) to rank
// j, which stores it as block i of its recv (i the sender). send and recv may be the
// same buffer.
func (c *Comm) AlltoAll(send, recv []byte, count int, dt DataType, opts ...OpOption) (*Request, error) {
	if err := checkType(KindAlltoAll, dt); err != nil {
		return nil, err
	}
	total, err := c.perRankTotal(KindAlltoAll, count)
	if err != nil {
		return nil, err
	}
	if err := checkBuffers(KindAlltoAll, dt, count, send, total, recv, total); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindAlltoAll, send: send, recv: recv, count: count, dtype: dt, root: -1}, opts...)
}

// AlltoAllv sends sendCounts[j] elements at element offset sendDispls[j] of send to
// rank j, and receives recvCounts[j] elements from rank j at element offset
// recvDispls[j] of recv. Each slice has one entry per rank and is copied before
// AlltoAllv returns. What rank i sends to rank j must be what rank j expects from
// rank i, or both fail with ErrMismatch. send and recv may overlap.
func (c *Comm) AlltoAllv(send []byte, sendCounts, sendDispls []int, recv []byte, recvCounts, recvDispls []int, dt DataType, opts ...OpOption) (*Request, error) {
	k := KindAlltoAllv
	if err := checkType(k, dt); err != nil {
		return nil, err
	}
	a := &vArgs{}
	for _, s := range []struct {
		name string
		in   []int
		out  *[]int
	}{
		{"sendcounts", sendCounts, &a.sendCounts}, {"sdispls", sendDispls, &a.sendDispls},
		{"recvcounts", recvCounts, &a.recvCounts}, {"rdispls", recvDispls, &a.recvDispls},
	} {
		if len(s.in) != c.nranks {
			return nil, invalidf("%s: %s has %d entries, need one per rank (%d)", k, s.name, len(s.in), c.nranks)
		}
		for j, v := range s.in {
			if v < 0 {
				return nil, invalidf("%s: %s[%d] is negative (%d)", k, s.name, j, v)
			}
		}
		*s.out = append([]int(nil), s.in...)
	}
	if a.sendCounts[c.rank] != a.recvCounts[c.rank] {
		return nil, invalidf("%s: rank %d sends itself %d elements but expects %d (sendcounts[%d] != recvcounts[%d])",
			k, c.rank, a.sendCounts[c.rank], a.recvCounts[c.rank], c.rank, c.rank)
	}
	es := dt.Size()
	for j := 0; j < c.nranks; j++ {
		for _, b := range []struct {
			name         string
			buf          []byte
			count, displ int
		}{{"send", send, a.sendCounts[j], a.sendDispls[j]}, {"receive", recv, a.recvCounts[j], a.recvDispls[j]}} {
			if b.count == 0 {
				continue
			}
			if b.displ > math.MaxInt/es-b.count || len(b.buf) < (b.displ+b.count)*es {
				return nil, invalidf("%s: %s buffer holds %d bytes, need %d elements at element offset %d for rank %d (%s)",
					k, b.name, len(b.buf), b.count, b.displ, j, dt)
			}
		}
	}
	return c.enqueue(&op{kind: k, send: send, recv: recv, vargs: a, dtype: dt, root: -1}, opts...)
}

// MaxBufferBytes bounds the size of any buffer gonccl accepts (128 TiB): a user
// address space is 2^47 bytes on x86-64, so a larger count is a mistake (or a negative
// number cast to size_t), and checking against it keeps every byte offset an algorithm
// computes (count x element size x ranks, and sums of such) far from overflowing.
const MaxBufferBytes = 1 << 47

// checkByteSize rejects n elements of dt whose byte size would exceed MaxBufferBytes
// (or overflow).
func checkByteSize(what string, n int, dt DataType) error {
	if es := dt.Size(); n > MaxBufferBytes/es {
		return invalidf("%s: count %d x %s (%d bytes each) overflows: more than the %d bytes any buffer can hold",
			what, n, dt, es, MaxBufferBytes)
	}
	return nil
}

func (c *Comm) checkRoot(k Kind, root int) error {
	if root < 0 || root >= c.nranks {
		return invalidf("%s: root %d is out of range for %d ranks", k, root, c.nranks)
	}
	return nil
}

// perRankTotal returns nranks*count, checking that it does not overflow.
func (c *Comm) perRankTotal(k Kind, count int) (int, error) {
	if count < 0 {
		return 0, invalidf("%s: negative count %d", k, count)
	}
	if count > MaxBufferBytes/c.nranks {
		return 0, invalidf("%s: count %d x %d ranks overflows", k, count, c.nranks)
	}
	return count * c.nranks, nil
}

// NoRoot is CheckOp's root for the collectives that have none.
const NoRoot = math.MinInt

// CheckOp makes the checks core makes of a collective of kind k before it runs, for
// callers that run it elsewhere (the C ABI's device paths): the reduction (op, unless
// nil) on dt, the root (unless NoRoot), and the communicator's state (its error, if
// it failed or was aborted).
func (c *Comm) CheckOp(k Kind, dt DataType, op *RedOp, root int) error {
	if op != nil {
		if err := CheckReduction(dt, *op); err != nil {
			return err
		}
	}
	if root != NoRoot {
		if err := c.checkRoot(k, root); err != nil {
			return err
		}
	}
	return c.Err()
}
