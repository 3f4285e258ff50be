package core

// allReduceRD reduces buf across all ranks in place by recursive doubling: log2(n)
// rounds in which partners at distance 1, 2, 4, ... exchange their whole buffers and
// reduce. It sends more bytes than the ring but needs only log2(n) message latencies,
// so it wins for small messages.
//
// When n is not a power of two, the first 2*rem ranks (rem = n - p2) pair up first:
// each even rank hands its data to the odd rank above it and sits out; the odd ranks
// take part as virtual rank r/2 and hand the result back at the end.
//
//	n = 6, p2 = 4, rem = 2:   ranks 0->1, 2->3 fold;  virtual ranks 1:0 3:1 4:2 5:3
//
// Every reduction combines the two partners' values with a commutative op, so both
// partners (and finally all ranks) hold bit-identical results.
func (e *exec) allReduceRD(buf []byte, dt DataType, op RedOp) error {
	n, r := e.nranks, e.rank
	p2 := 1
	for p2*2 <= n {
		p2 *= 2
	}
	rem := n - p2
	tmp := e.scratch[:len(buf)]
	vr := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			if err := e.send(r+1, 0, buf); err != nil {
				return err
			}
			vr = -1
		} else {
			if err := e.recv(r-1, 0, tmp); err != nil {
				return err
			}
			if err := ReduceInto(buf, tmp, dt, op); err != nil {
				return err
			}
			vr = r / 2
		}
	}
	if vr >= 0 {
		for mask := 1; mask < p2; mask <<= 1 {
			pv := vr ^ mask
			peer := pv + rem
			if pv < rem {
				peer = pv*2 + 1
			}
			if err := e.sendRecv(peer, buf, peer, tmp); err != nil {
				return err
			}
			if err := ReduceInto(buf, tmp, dt, op); err != nil {
				return err
			}
		}
	}
	if r < 2*rem {
		var err error
		if r%2 == 1 {
			err = e.send(r-1, 0, buf)
		} else {
			err = e.recv(r+1, 0, buf)
		}
		if err != nil {
			return err
		}
	}
	if op == Avg {
		return DivideBy(buf, dt, n)
	}
	return nil
}
