package core

import "fmt"

// Every collective runs through the table (colltable.go): its kind's row has the run
// function, which picks the algorithm (Comm.pick: the selector in tuning.go), records
// it in the frame header and runs it on the exec.

// dispatch runs o with the algorithm its kind and size call for.
func (c *Comm) dispatch(e *exec, o *op) error {
	row := o.kind.row()
	if row == nil {
		return fmt.Errorf("%w: operation kind %d", ErrNotSupported, o.kind)
	}
	return row.run(c, e, o)
}

// pick chooses k's algorithm for a message of bytes and records it in the frame header.
func (c *Comm) pick(e *exec, k Kind, bytes int) (Algo, error) {
	algo, err := c.sel.choose(k, bytes)
	if err != nil {
		return AlgoNone, err
	}
	e.hdr.Algo = uint8(algo)
	return algo, nil
}

// runAllReduce runs all_reduce: recursive doubling, direct, ring, halving, chain or
// hierarchical (see tuning.go).
func (c *Comm) runAllReduce(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	e.hdr.Op = uint8(o.redop)
	buf := o.recv[:o.count*es]
	if n == 1 {
		return reduceAlone(buf, o.send[:len(buf)], o)
	}
	algo, err := c.pick(e, KindAllReduce, len(buf))
	if err != nil {
		return err
	}
	if done, err := c.zeroCopy(e, o); done {
		return err
	}
	copyIfDistinct(buf, o.send[:len(buf)])
	switch algo {
	case AlgoHier:
		work, err := c.workBuf(reduceWindow * (c.cfg.chunkBytes + es))
		if err != nil {
			return err
		}
		return e.allReduceHier(buf, o.count, o.dtype, o.redop, c.hosts, work)
	case AlgoRecDoubling:
		return e.allReduceRD(buf, o.dtype, o.redop)
	case AlgoHalving:
		return e.allReduceHalving(buf, o.count, o.dtype, o.redop)
	case AlgoChain:
		work, err := c.workBuf(reduceWindow * (c.cfg.chunkBytes + es))
		if err != nil {
			return err
		}
		return e.allReduceChain(buf, o.count, o.dtype, o.redop, work)
	case AlgoDirect:
		work, err := c.workBuf(2 * len(buf))
		if err != nil {
			return err
		}
		return e.allReduceDirect(buf, o.dtype, o.redop, work)
	}
	return e.allReduceRing(buf, o.count, o.dtype, o.redop)
}

// runBroadcast runs broadcast: a binomial tree or a pipelined chain.
func (c *Comm) runBroadcast(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	buf := o.recv[:o.count*es]
	if n == 1 {
		copyIfDistinct(buf, o.send[:o.count*es])
		return nil
	}
	algo, err := c.pick(e, KindBroadcast, len(buf))
	if err != nil {
		return err
	}
	if done, err := c.zeroCopy(e, o); done {
		return err
	}
	if c.rank == o.root {
		copyIfDistinct(buf, o.send[:o.count*es])
	}
	if algo == AlgoTree {
		return e.broadcastTree(buf, o.root)
	}
	return e.broadcastChain(buf, o.root)
}

// runAllGather runs all_gather: direct or ring.
func (c *Comm) runAllGather(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	block := o.count * es
	if n == 1 {
		copyIfDistinct(o.recv[:block], o.send[:block])
		return nil
	}
	algo, err := c.pick(e, KindAllGather, block)
	if err != nil {
		return err
	}
	if done, err := c.zeroCopy(e, o); done {
		return err
	}
	copyIfDistinct(o.recv[c.rank*block:(c.rank+1)*block], o.send[:block])
	if algo == AlgoDirect {
		return e.allGatherDirect(o.recv[:n*block], block)
	}
	return e.allGatherRing(o.recv[:n*block], block)
}

// runBarrier runs barrier: dissemination.
func (c *Comm) runBarrier(e *exec, o *op) error {
	n := c.nranks
	if n == 1 {
		return nil
	}
	if _, err := c.pick(e, KindBarrier, 0); err != nil {
		return err
	}
	return e.barrierDissemination()
}

// runReduce runs reduce: a binomial tree or a pipelined chain.
func (c *Comm) runReduce(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	e.hdr.Op = uint8(o.redop)
	size := o.count * es
	if n == 1 {
		return reduceAlone(o.recv[:size], o.send[:size], o)
	}
	algo, err := c.pick(e, KindReduce, size)
	if err != nil {
		return err
	}
	if algo == AlgoTree {
		work, err := c.workBuf(2 * size)
		if err != nil {
			return err
		}
		return e.reduceTree(o.send[:size], o.recv, o.dtype, o.redop, o.root, work)
	}
	work, err := c.workBuf(reduceWindow * (c.cfg.chunkBytes + es))
	if err != nil {
		return err
	}
	return e.reduceChain(o.send, o.recv, o.count, o.dtype, o.redop, o.root, work)
}

// runReduceScatter runs reduce_scatter: ring.
func (c *Comm) runReduceScatter(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	e.hdr.Op = uint8(o.redop)
	block := o.count * es
	if n == 1 {
		return reduceAlone(o.recv[:block], o.send[:block], o)
	}
	algo, err := c.pick(e, KindReduceScatter, block)
	if err != nil {
		return err
	}
	if done, err := c.zeroCopy(e, o); done {
		return err
	}
	if algo == AlgoHalving {
		work, err := c.workBuf(n * block)
		if err != nil {
			return err
		}
		return e.reduceScatterHalving(o.send[:n*block], o.recv, o.count, o.dtype, o.redop, work)
	}
	work, err := c.workBuf(reduceWindow * (c.cfg.chunkBytes + es))
	if err != nil {
		return err
	}
	return e.reduceScatterRing(o.send[:n*block], o.recv, o.count, o.dtype, o.redop, work)
}

// runGather runs gather: direct.
func (c *Comm) runGather(e *exec, o *op) error {
	es := o.dtype.Size()
	if _, err := c.pick(e, KindGather, o.count*es); err != nil {
		return err
	}
	return e.gatherDirect(o.send, o.recv, o.count*es, o.root)
}

// runScatter runs scatter: direct.
func (c *Comm) runScatter(e *exec, o *op) error {
	es := o.dtype.Size()
	if _, err := c.pick(e, KindScatter, o.count*es); err != nil {
		return err
	}
	return e.scatterDirect(o.send, o.recv, o.count*es, o.root)
}

// runAlltoAll runs alltoall: pairwise exchange (in place through work memory).
func (c *Comm) runAlltoAll(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	if _, err := c.pick(e, KindAlltoAll, o.count*es); err != nil {
		return err
	}
	block := o.count * es
	send := o.send[:n*block]
	if overlaps(send, o.recv[:n*block]) { // in place: keep the input while recv fills
		work, err := c.workBuf(len(send))
		if err != nil {
			return err
		}
		copy(work, send)
		send = work
	}
	per := func(int) int { return o.count }
	return e.alltoAllPairwise(
		func(j int) []byte { return send[j*block : (j+1)*block] },
		func(j int) []byte { return o.recv[j*block : (j+1)*block] },
		per, per, nil)
}

// runAlltoAllv runs alltoallv: pairwise exchange of per-pair counts (in place through work memory).
func (c *Comm) runAlltoAllv(e *exec, o *op) error {
	es := o.dtype.Size()
	if _, err := c.pick(e, KindAlltoAll, 0); err != nil {
		return err
	}
	a := o.vargs
	block := func(buf []byte, displ, count int) []byte {
		if count == 0 { // its displacement may point anywhere
			return nil
		}
		return buf[displ*es : (displ+count)*es]
	}
	extent := func(displs, counts []int) int {
		end := 0
		for j := range counts {
			if counts[j] > 0 {
				end = max(end, (displs[j]+counts[j])*es)
			}
		}
		return end
	}
	send := o.send[:extent(a.sendDispls, a.sendCounts)]
	if overlaps(send, o.recv[:extent(a.recvDispls, a.recvCounts)]) {
		work, err := c.workBuf(len(send))
		if err != nil {
			return err
		}
		copy(work, send)
		send = work
	}
	return e.alltoAllPairwise(
		func(j int) []byte { return block(send, a.sendDispls[j], a.sendCounts[j]) },
		func(j int) []byte { return block(o.recv, a.recvDispls[j], a.recvCounts[j]) },
		func(j int) int { return a.sendCounts[j] },
		func(j int) int { return a.recvCounts[j] }, a)
}

// reduceAlone is a reduction on a single rank: the result is the rank's own input,
// copied unless in place; Avg still divides by 1, which checks the data type as the
// reduction on more ranks would.
func reduceAlone(dst, src []byte, o *op) error {
	copyIfDistinct(dst, src)
	if o.redop == Avg {
		return DivideBy(dst, o.dtype, 1)
	}
	return nil
}

func copyIfDistinct(dst, src []byte) {
	if len(dst) == 0 || &dst[0] == &src[0] {
		return
	}
	copy(dst, src)
}
