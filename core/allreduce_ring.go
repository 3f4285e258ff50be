package core

// allReduceRing reduces buf (count elements) across all ranks in place: a ring
// reduce-scatter followed by a ring all-gather, every segment cut into chunks so that
// receiving, reducing and forwarding of different chunks overlap.
//
// The buffer is cut into n segments. At reduce-scatter step s (0 <= s < n-1) rank r
// sends segment r-s to rank r+1 and receives segment r-s-1 from rank r-1, reducing it
// into its own copy. After n-1 steps rank r holds the full reduction of segment r+1.
// The all-gather steps then pass the finished segments around the ring:
//
//	step:          RS 0    RS 1    AG 0    AG 1        (n = 3, rank r)
//	sends seg:     r       r-1     r+1     r
//	receives seg:  r-1     r-2     r       r-1
//
// What a rank sends at step s+1 is what it received at step s, chunk for chunk, so a
// send unit depends on the receive unit one step (nch units) earlier. Every rank
// forwards the owner's bytes of each finished segment, so all ranks end bit-identical.
func (e *exec) allReduceRing(buf []byte, count int, dt DataType, op RedOp) error {
	return e.ringSteps(buf, count, dt, op, 0, 2*(e.nranks-1))
}

// ringSteps runs steps first..last-1 of allReduceRing: 0..n-2 alone are a ring
// reduce-scatter (rank r then holds the reduction of segment r+1, split(count, n, r+1),
// divided by n for Avg), n-1..2n-3 alone the matching all-gather.
func (e *exec) ringSteps(buf []byte, count int, dt DataType, op RedOp, first, last int) error {
	n, r, es := e.nranks, e.rank, dt.Size()
	next, prev := mod(r+1, n), mod(r-1, n)
	nch := max(1, ceilDiv(ceilDiv(count, n)*es, e.chunkBytes))
	chunk := func(seg, j int) (lo, hi int) {
		slo, shi := split(count, n, seg)
		clo, chi := split(shi-slo, nch, j)
		return (slo + clo) * es, (slo + chi) * es
	}
	sendSeg := func(s int) int {
		if s < n-1 {
			return mod(r-s, n)
		}
		return mod(r+1-(s-(n-1)), n)
	}
	recvSeg := func(s int) int {
		if s < n-1 {
			return mod(r-s-1, n)
		}
		return mod(r-(s-(n-1)), n)
	}
	units := (last - first) * nch
	base := first * nch
	return e.pipeline(pipe{
		nsend: units, nrecv: units,
		need: func(u int) int { return u - nch + 1 },
		send: func(u int) error {
			u += base
			lo, hi := chunk(sendSeg(u/nch), u%nch)
			return e.send(next, lo, buf[lo:hi])
		},
		recv: func(u int) error {
			u += base
			s := u / nch
			lo, hi := chunk(recvSeg(s), u%nch)
			dst := buf[lo:hi]
			if s >= n-1 {
				return e.recv(prev, lo, dst)
			}
			if err := e.recvReduce(prev, lo, dst, dt, op); err != nil {
				return err
			}
			if s == n-2 && op == Avg {
				return DivideBy(dst, dt, n)
			}
			return nil
		},
	})
}
