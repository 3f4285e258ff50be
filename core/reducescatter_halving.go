package core

// reduceScatterHalving reduces send (n blocks of recvCount elements) across all ranks
// and leaves block r of the result in recv on rank r, by recursive halving: log2(n)
// steps instead of the ring's n-1, each rank sending and reducing the ring's bytes
// ((n-1)/n of the input) but in halves swapped with one partner per step. Where steps
// cost more than bytes (many ranks, or more ranks than cores, where every step waits
// for the next process to be scheduled) it is far faster.
//
// The work copy of send (n blocks) is what is halved: send is never written. With p2
// the largest power of two <= n, the first 2*(n-p2) ranks pair up first, as in
// allReduceHalving: even rank r hands its whole input to r+1, which reduces it in and
// takes part as virtual rank r/2 on behalf of both; the others are virtual rank r-rem.
// Virtual rank v owns the blocks of the real ranks it stands for, a contiguous run:
//
//	n = 6, p2 = 4, rem = 2:  v=0: blocks 0-1 (ranks 0, 1)   v=1: blocks 2-3 (ranks 2, 3)
//	                         v=2: block 4                   v=3: block 5
//
// At step d = p2/2, ..., 1, v and v^d split the virtual ranks whose blocks they both
// still reduce: the one with bit d clear keeps the lower half and sends the upper, the
// other the reverse. After log2(p2) steps v holds its own blocks, finished; a virtual
// rank standing for two hands the even rank its block.
func (e *exec) reduceScatterHalving(send, recv []byte, recvCount int, dt DataType, op RedOp, work []byte) error {
	n, r, es := e.nranks, e.rank, dt.Size()
	block := recvCount * es
	buf := work[:n*block]
	copy(buf, send[:n*block])
	p2 := 1
	for p2*2 <= n {
		p2 *= 2
	}
	rem := n - p2
	whole := elemRange{0, n * recvCount}
	if r < 2*rem && r%2 == 0 {
		// Hand the input to r+1, then take block r back, finished, straight into recv
		// (what was sent stays as it was until the operation ends).
		if err := e.swapRanges(r+1, buf, es, whole, elemRange{}, false, dt, op); err != nil {
			return err
		}
		out := recv[:block]
		for lo := 0; lo < block; lo += max(es, e.chunkBytes/es*es) {
			hi := min(lo+max(es, e.chunkBytes/es*es), block)
			if err := e.recv(r+1, r*block+lo, out[lo:hi]); err != nil {
				return err
			}
		}
		return finishBlock(out, out, dt, op, n)
	}
	vr := r - rem
	if r < 2*rem {
		if err := e.swapRanges(r-1, buf, es, elemRange{}, whole, true, dt, op); err != nil {
			return err
		}
		vr = r / 2
	}
	peerOf := func(pv int) int {
		if pv < rem {
			return 2*pv + 1
		}
		return pv + rem
	}
	// first is the first real block of virtual rank v (first(p2) = n).
	first := func(v int) int {
		if v < rem {
			return 2 * v
		}
		return v + rem
	}
	blocks := func(lo, hi int) elemRange { return elemRange{first(lo) * recvCount, first(hi) * recvCount} }
	if _, err := e.halve(vr, p2, peerOf, blocks, buf, es, dt, op); err != nil {
		return err
	}
	if r < 2*rem { // standing for r-1 too: hand it its block
		if err := e.swapRanges(r-1, buf, es, elemRange{(r - 1) * recvCount, r * recvCount}, elemRange{}, false, dt, op); err != nil {
			return err
		}
	}
	return finishBlock(recv[:block], buf[r*block:(r+1)*block], dt, op, n)
}

// finishBlock copies a rank's finished block out of the work copy into recv, dividing
// it by n for an average.
func finishBlock(recv, done []byte, dt DataType, op RedOp, n int) error {
	copy(recv, done)
	if op == Avg {
		return DivideBy(recv, dt, n)
	}
	return nil
}
