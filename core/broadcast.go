package core

// broadcastTree sends buf from root to every rank along a binomial tree: in round k
// every rank that already has the data sends it to the rank 2^k above it (in ranks
// relative to the root), so all n ranks have it after log2(n) rounds.
//
//	relative rank:  0 -> 1;  0 -> 2, 1 -> 3;  0 -> 4, 1 -> 5, 2 -> 6, 3 -> 7
func (e *exec) broadcastTree(buf []byte, root int) error {
	n := e.nranks
	vr := mod(e.rank-root, n)
	mask := 1
	for mask < n {
		if vr&mask != 0 {
			if err := e.recv(mod(vr-mask+root, n), 0, buf); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < n {
			if err := e.sendKept(mod(vr+mask+root, n), 0, buf); err != nil {
				return err
			}
		}
	}
	return nil
}

// broadcastChain sends buf from root down the chain root, root+1, ..., root-1 in
// chunks: each rank forwards chunk j as soon as it has received it, so for large
// messages every link carries data at once and the time approaches one copy of buf.
func (e *exec) broadcastChain(buf []byte, root int) error {
	n := e.nranks
	vr := mod(e.rank-root, n)
	nch := max(1, ceilDiv(len(buf), e.chunkBytes))
	chunk := func(j int) (int, int) { return split(len(buf), nch, j) }
	nsend, nrecv := nch, nch
	if vr == n-1 {
		nsend = 0
	}
	need := func(u int) int { return u + 1 }
	if vr == 0 {
		nrecv = 0
		need = func(int) int { return 0 }
	}
	next, prev := mod(e.rank+1, n), mod(e.rank-1, n)
	return e.pipeline(pipe{
		nsend: nsend, nrecv: nrecv, need: need,
		send: func(u int) error {
			lo, hi := chunk(u)
			return e.sendKept(next, lo, buf[lo:hi])
		},
		recv: func(u int) error {
			lo, hi := chunk(u)
			return e.recv(prev, lo, buf[lo:hi])
		},
	})
}
