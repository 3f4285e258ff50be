package core

import "fmt"

// Every collective runs through one table: its kind picks a run function, which
// picks the algorithm (the selector in tuning.go, under the names GONCCL_ALGO uses),
// records it in the frame header and runs it on the exec.

// runners maps an operation kind to its run function.
var runners = [...]func(c *Comm, e *exec, o *op) error{
	KindAllReduce:     (*Comm).runAllReduce,
	KindBroadcast:     (*Comm).runBroadcast,
	KindAllGather:     (*Comm).runAllGather,
	KindBarrier:       (*Comm).runBarrier,
	KindReduce:        (*Comm).runReduce,
	KindReduceScatter: (*Comm).runReduceScatter,
	KindGather:        (*Comm).runGather,
	KindScatter:       (*Comm).runScatter,
	KindAlltoAll:      (*Comm).runAlltoAll,
	KindAlltoAllv:     (*Comm).runAlltoAllv,
}

// dispatch runs o with the algorithm its kind and size call for.
func (c *Comm) dispatch(e *exec, o *op) error {
	if int(o.kind) >= len(runners) || runners[o.kind] == nil {
		return fmt.Errorf("%w: operation kind %d", ErrNotSupported, o.kind)
	}
	return runners[o.kind](c, e, o)
}

// runAllReduce runs all_reduce: recursive doubling, direct, ring or hierarchical (see tuning.go).
func (c *Comm) runAllReduce(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	e.hdr.Op = uint8(o.redop)
	buf := o.recv[:o.count*es]
	copyIfDistinct(buf, o.send[:o.count*es])
	if n == 1 {
		if o.redop == Avg {
			return DivideBy(buf, o.dtype, 1)
		}
		return nil
	}
	algo, err := c.sel.choose("allreduce", len(buf))
	if err != nil {
		return err
	}
	switch algo {
	case "hier":
		e.hdr.Algo = uint8(AlgoHier)
		work, err := c.workBuf(reduceWindow * (c.cfg.chunkBytes + es))
		if err != nil {
			return err
		}
		return e.allReduceHier(buf, o.count, o.dtype, o.redop, c.hosts, work)
	case "rd":
		e.hdr.Algo = uint8(AlgoRecDoubling)
		return e.allReduceRD(buf, o.dtype, o.redop)
	case "direct":
		e.hdr.Algo = uint8(AlgoDirect)
		work, err := c.workBuf(2 * len(buf))
		if err != nil {
			return err
		}
		return e.allReduceDirect(buf, o.dtype, o.redop, work)
	}
	e.hdr.Algo = uint8(AlgoRing)
	return e.allReduceRing(buf, o.count, o.dtype, o.redop)
}

// runBroadcast runs broadcast: a binomial tree or a pipelined chain.
func (c *Comm) runBroadcast(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	buf := o.recv[:o.count*es]
	if c.rank == o.root {
		copyIfDistinct(buf, o.send[:o.count*es])
	}
	if n == 1 {
		return nil
	}
	algo, err := c.sel.choose("broadcast", len(buf))
	if err != nil {
		return err
	}
	if algo == "tree" {
		e.hdr.Algo = uint8(AlgoTree)
		return e.broadcastTree(buf, o.root)
	}
	e.hdr.Algo = uint8(AlgoChain)
	return e.broadcastChain(buf, o.root)
}

// runAllGather runs all_gather: direct or ring.
func (c *Comm) runAllGather(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	block := o.count * es
	copyIfDistinct(o.recv[c.rank*block:(c.rank+1)*block], o.send[:block])
	if n == 1 {
		return nil
	}
	algo, err := c.sel.choose("allgather", block)
	if err != nil {
		return err
	}
	if algo == "direct" {
		e.hdr.Algo = uint8(AlgoDirect)
		return e.allGatherDirect(o.recv[:n*block], block)
	}
	e.hdr.Algo = uint8(AlgoRing)
	return e.allGatherRing(o.recv[:n*block], block)
}

// runBarrier runs barrier: dissemination.
func (c *Comm) runBarrier(e *exec, o *op) error {
	n := c.nranks
	if n == 1 {
		return nil
	}
	if _, err := c.sel.choose("barrier", 0); err != nil {
		return err
	}
	e.hdr.Algo = uint8(AlgoDissemination)
	return e.barrierDissemination()
}

// runReduce runs reduce: a binomial tree or a pipelined chain.
func (c *Comm) runReduce(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	e.hdr.Op = uint8(o.redop)
	size := o.count * es
	if n == 1 {
		copyIfDistinct(o.recv[:size], o.send[:size])
		if o.redop == Avg {
			return DivideBy(o.recv[:size], o.dtype, 1)
		}
		return nil
	}
	algo, err := c.sel.choose("reduce", size)
	if err != nil {
		return err
	}
	if algo == "tree" {
		e.hdr.Algo = uint8(AlgoTree)
		work, err := c.workBuf(2 * size)
		if err != nil {
			return err
		}
		return e.reduceTree(o.send[:size], o.recv, o.dtype, o.redop, o.root, work)
	}
	e.hdr.Algo = uint8(AlgoChain)
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
		copyIfDistinct(o.recv[:block], o.send[:block])
		if o.redop == Avg {
			return DivideBy(o.recv[:block], o.dtype, 1)
		}
		return nil
	}
	if _, err := c.sel.choose("reducescatter", block); err != nil {
		return err
	}
	e.hdr.Algo = uint8(AlgoRing)
	work, err := c.workBuf(reduceWindow * (c.cfg.chunkBytes + es))
	if err != nil {
		return err
	}
	return e.reduceScatterRing(o.send[:n*block], o.recv, o.count, o.dtype, o.redop, work)
}

// runGather runs gather: direct.
func (c *Comm) runGather(e *exec, o *op) error {
	es := o.dtype.Size()
	if _, err := c.sel.choose("gather", o.count*es); err != nil {
		return err
	}
	e.hdr.Algo = uint8(AlgoDirect)
	return e.gatherDirect(o.send, o.recv, o.count*es, o.root)
}

// runScatter runs scatter: direct.
func (c *Comm) runScatter(e *exec, o *op) error {
	es := o.dtype.Size()
	if _, err := c.sel.choose("scatter", o.count*es); err != nil {
		return err
	}
	e.hdr.Algo = uint8(AlgoDirect)
	return e.scatterDirect(o.send, o.recv, o.count*es, o.root)
}

// runAlltoAll runs alltoall: pairwise exchange (in place through work memory).
func (c *Comm) runAlltoAll(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	if _, err := c.sel.choose("alltoall", o.count*es); err != nil {
		return err
	}
	e.hdr.Algo = uint8(AlgoPairwise)
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
	return e.alltoallPairwise(
		func(j int) []byte { return send[j*block : (j+1)*block] },
		func(j int) []byte { return o.recv[j*block : (j+1)*block] },
		per, per, nil)
}

// runAlltoAllv runs alltoallv: pairwise exchange of per-pair counts (in place through work memory).
func (c *Comm) runAlltoAllv(e *exec, o *op) error {
	es := o.dtype.Size()
	if _, err := c.sel.choose("alltoall", 0); err != nil {
		return err
	}
	e.hdr.Algo = uint8(AlgoPairwise)
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
	return e.alltoallPairwise(
		func(j int) []byte { return block(send, a.sendDispls[j], a.sendCounts[j]) },
		func(j int) []byte { return block(o.recv, a.recvDispls[j], a.recvCounts[j]) },
		func(j int) int { return a.sendCounts[j] },
		func(j int) int { return a.recvCounts[j] }, a)
}

func copyIfDistinct(dst, src []byte) {
	if len(dst) == 0 || &dst[0] == &src[0] {
		return
	}
	copy(dst, src)
}
