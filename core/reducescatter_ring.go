package core

// reduceScatterRing reduces send (n blocks of block bytes) across all ranks and
// leaves block r of the result in recv on rank r. Ring: at step s (0 <= s < n-1)
// rank r sends block r-s-1 to rank r+1 and receives block r-s-2 from rank r-1,
// reducing its own input block into it; what it receives at step s it forwards at
// step s+1, and what it receives at the last step is block r, finished.
//
//	step:           0      1      ...   n-2
//	sends block:    r-1    r-2          r+1     (step 0: its own input)
//	receives block: r-2    r-3          r       (last step: into recv)
//
// The blocks are cut into nch slices and the ring runs slice by slice, the way
// NCCL's does (unit u = slice*(n-1) + step): a received chunk is forwarded at the
// very next send unit, so partials in flight need only reduceWindow chunk slots of
// work, whatever the message size, and send is never written. In place
// (recv == send's block r) is safe: block r of send is only read at the last step,
// just before the finished chunk overwrites it.
func (e *exec) reduceScatterRing(send, recv []byte, recvCount int, dt DataType, op RedOp, work []byte) error {
	n, r, es := e.nranks, e.rank, dt.Size()
	block := recvCount * es
	next, prev := mod(r+1, n), mod(r-1, n)
	nch := max(1, ceilDiv(block, e.chunkBytes))
	slot := ceilDiv(recvCount, nch) * es
	steps := n - 1
	// chunk returns slice j's byte range within a block.
	chunk := func(j int) (int, int) {
		lo, hi := split(recvCount, nch, j)
		return lo * es, hi * es
	}
	staged := func(u int) []byte { return work[(u%reduceWindow)*slot:][:slot] }
	out := recv[:block]
	inPlace := overlaps(out, send)
	units := nch * steps
	err := e.pipeline(pipe{
		nsend: units, nrecv: units,
		need: func(u int) int { // forward unit u-1's chunk, once it is in
			if u%steps == 0 {
				return 0
			}
			return u
		},
		free:   func(v int) int { return v - reduceWindow + 2 }, // unit v-reduceWindow's slot is sent by unit v-reduceWindow+1
		window: true,
		send: func(u int) error {
			s, j := u%steps, u/steps
			lo, hi := chunk(j)
			off := mod(r-s-1, n)*block + lo
			if s == 0 {
				return e.send(next, off, send[off:off+hi-lo])
			}
			return e.send(next, off, staged(u - 1)[:hi-lo])
		},
		recv: func(v int) error {
			s, j := v%steps, v/steps
			lo, hi := chunk(j)
			off := mod(r-s-2, n)*block + lo
			mine := send[off : off+hi-lo]
			if s < steps-1 {
				p := staged(v)[:hi-lo]
				if err := e.recv(prev, off, p); err != nil {
					return err
				}
				return ReduceInto(p, mine, dt, op)
			}
			dst := out[lo:hi]
			if !inPlace {
				if err := e.recv(prev, off, dst); err != nil {
					return err
				}
				return ReduceInto(dst, mine, dt, op)
			}
			p := staged(v)[:hi-lo]
			if err := e.recv(prev, off, p); err != nil {
				return err
			}
			return ReduceInto(dst, p, dt, op)
		},
	})
	if err != nil || op != Avg {
		return err
	}
	return DivideBy(out, dt, n)
}
