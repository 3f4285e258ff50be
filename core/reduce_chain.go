package core

// reduceWindow is how many chunks a chain or ring rank may hold received but not yet
// forwarded; two keep the pipeline moving, a few more absorb jitter.
const reduceWindow = 4

// reduceChain reduces send from every rank into recv on root along the chain
// root-1 -> root-2 -> ... -> root+1 -> root (the broadcast chain run backwards), in
// chunks: each rank receives chunk j's partial result from the rank after it,
// reduces its own chunk j into it and forwards it, while chunk j+1 is already
// arriving. For large messages every link carries data at once.
//
//	relative rank:  n-1 -> n-2 -> ... -> 1 -> 0 (root)
//
// Partials in flight on a middle rank use reduceWindow slots of work; root reduces
// straight into recv. Only root writes recv, and send is never written.
func (e *exec) reduceChain(send, recv []byte, count int, dt DataType, op RedOp, root int, work []byte) error {
	n, es := e.nranks, dt.Size()
	vr := mod(e.rank-root, n)
	nch := max(1, ceilDiv(count*es, e.chunkBytes))
	slot := ceilDiv(count, nch) * es
	chunk := func(j int) (int, int) {
		lo, hi := split(count, nch, j)
		return lo * es, hi * es
	}
	to, from := mod(e.rank-1, n), mod(e.rank+1, n)
	staged := func(j int) []byte {
		lo, hi := chunk(j)
		return work[(j%reduceWindow)*slot:][:hi-lo]
	}
	switch vr {
	case n - 1: // the tail sends its own data
		return e.pipeline(pipe{nsend: nch, send: func(j int) error {
			lo, hi := chunk(j)
			return e.send(to, lo, send[lo:hi])
		}})
	case 0: // root
		out := recv[:count*es]
		err := e.pipeline(pipe{nrecv: nch, recv: func(j int) error {
			lo, hi := chunk(j)
			if !overlaps(out, send) {
				if err := e.recv(from, lo, out[lo:hi]); err != nil {
					return err
				}
				return ReduceInto(out[lo:hi], send[lo:hi], dt, op)
			}
			return e.recvReduce(from, lo, out[lo:hi], dt, op)
		}})
		if err != nil || op != Avg {
			return err
		}
		return DivideBy(out, dt, n)
	}
	return e.pipeline(pipe{
		nsend: nch, nrecv: nch,
		need:   func(j int) int { return j + 1 },
		free:   func(j int) int { return j - reduceWindow + 1 },
		window: true,
		send: func(j int) error {
			lo, _ := chunk(j)
			return e.send(to, lo, staged(j))
		},
		recv: func(j int) error {
			lo, hi := chunk(j)
			p := staged(j)
			if err := e.recv(from, lo, p); err != nil {
				return err
			}
			return ReduceInto(p, send[lo:hi], dt, op)
		},
	})
}
