package core

import "fmt"

// dispatchExt picks the algorithm for reduce, reduce_scatter, gather, scatter and
// alltoall(v), and runs it (dispatch's other half).
func (c *Comm) dispatchExt(e *exec, o *op) error {
	n, es := c.nranks, o.dtype.Size()
	switch o.kind {
	case KindReduce:
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
	case KindReduceScatter:
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
	case KindGather:
		if _, err := c.sel.choose("gather", o.count*es); err != nil {
			return err
		}
		e.hdr.Algo = uint8(AlgoDirect)
		return e.gatherDirect(o.send, o.recv, o.count*es, o.root)
	case KindScatter:
		if _, err := c.sel.choose("scatter", o.count*es); err != nil {
			return err
		}
		e.hdr.Algo = uint8(AlgoDirect)
		return e.scatterDirect(o.send, o.recv, o.count*es, o.root)
	case KindAlltoAll:
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
	case KindAlltoAllv:
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
	return fmt.Errorf("%w: operation kind %d", ErrNotSupported, o.kind)
}
