package core

// reduceTree reduces send from every rank into recv on root along a binomial tree,
// the broadcast tree run backwards: in round k every rank whose relative rank has
// bit k set sends its partial result to the rank 2^k below it and drops out; the
// others receive from the rank 2^k above them (if any) and reduce. Root has the
// result after log2(n) rounds.
//
//	relative rank:  1 -> 0, 3 -> 2, 5 -> 4, 7 -> 6;  2 -> 0, 6 -> 4;  4 -> 0
//
// Only root writes recv, and send is never written. Partial results of ranks that
// receive live in work (2*len(send) bytes): work[:len] accumulates (root accumulates in recv), work[len:] is the
// receive staging. Leaves send straight from send.
func (e *exec) reduceTree(send, recv []byte, dt DataType, op RedOp, root int, work []byte) error {
	n, size := e.nranks, len(send)
	vr := mod(e.rank-root, n)
	acc, staged := send, false // this rank's partial result so far; is it in work?
	if vr == 0 {
		copyIfDistinct(recv[:size], send)
		acc, staged = recv[:size], true
	}
	tmp := work[size : 2*size]
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			return e.send(mod(vr-mask+root, n), 0, acc)
		}
		if vr+mask >= n {
			continue
		}
		if !staged {
			acc, staged = work[:size], true
			copy(acc, send)
		}
		if err := e.recv(mod(vr+mask+root, n), 0, tmp); err != nil {
			return err
		}
		if err := ReduceInto(acc, tmp, dt, op); err != nil {
			return err
		}
	}
	if op == Avg {
		return DivideBy(acc, dt, n)
	}
	return nil
}
