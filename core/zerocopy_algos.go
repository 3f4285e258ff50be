package core

// The work of the zero-copy collectives (step 2 in zerocopy.go), on every rank's
// buffers as mapped here (b.send[p], b.recv[p]: rank p's; this rank's own are the
// caller's). Each rank writes only what no other rank reads or writes during the
// step, so the step needs no ordering inside it:
//
//	all_reduce      rank r owns shard r of the elements (cut at 64-byte boundaries):
//	                it folds shard r of every input, in rank order, into a
//	                cache-sized piece of scratch at a time and copies the piece into
//	                shard r of every output. Only rank r reads or writes shard r of
//	                any buffer, so in place (input = output) is safe.
//	reduce_scatter  rank r folds block r of every input into its own output.
//	all_gather      rank r copies every rank's input into its own output.
//	broadcast       every rank but the root copies the root's input into its output.

// zcRun runs step 2 of o.
func (c *Comm) zcRun(e *exec, o *op, b zcBufs) error {
	skip := -1 // the test fault skip-peer leaves this rank's data out
	if c.cfg.zeroCopyFault == "skip-peer" {
		skip = mod(c.rank+1, c.nranks)
	}
	es := o.dtype.Size()
	switch o.kind {
	case KindAllReduce:
		unit := max(1, 64/es)
		units := ceilDiv(o.count, unit)
		lo, hi := split(units, c.nranks, c.rank)
		lo, hi = min(lo*unit, o.count)*es, min(hi*unit, o.count)*es
		return e.zcReduce(b.send, lo, hi, b.recv, lo, o, skip)
	case KindReduceScatter:
		block := o.count * es
		mine := make([][]byte, c.nranks)
		mine[c.rank] = b.recv[c.rank]
		return e.zcReduce(b.send, c.rank*block, (c.rank+1)*block, mine, 0, o, skip)
	case KindAllGather:
		block := o.count * es
		for i := 0; i < c.nranks; i++ {
			p := mod(c.rank+i, c.nranks)
			if p != skip {
				copyIfDistinct(b.recv[c.rank][p*block:(p+1)*block], b.send[p])
			}
		}
	case KindBroadcast:
		if c.rank == o.root {
			copyIfDistinct(b.recv[c.rank], b.send[c.rank])
		} else if skip < 0 {
			copy(b.recv[c.rank], b.send[o.root])
		}
	}
	return nil
}

// zcReduce folds bytes [lo, hi) of every rank's in (rank order) and writes the result
// at byte at of every non-nil out, a piece of scratch at a time. skip >= 0 leaves that
// rank out (a test fault).
func (e *exec) zcReduce(in [][]byte, lo, hi int, out [][]byte, at int, o *op, skip int) error {
	es := o.dtype.Size()
	piece := max(es, min(zcChunkBytes, len(e.scratch))/es*es)
	for p0 := lo; p0 < hi; p0 += piece {
		p1 := min(p0+piece, hi)
		acc := e.scratch[:p1-p0]
		first := true
		for p := range in {
			if p == skip {
				continue
			}
			src := in[p][p0:p1]
			if first {
				copy(acc, src)
				first = false
			} else if err := ReduceInto(acc, src, o.dtype, o.redop); err != nil {
				return err
			}
		}
		if o.redop == Avg {
			if err := DivideBy(acc, o.dtype, e.nranks); err != nil {
				return err
			}
		}
		for _, dst := range out {
			if dst != nil {
				copy(dst[at+p0-lo:], acc)
			}
		}
	}
	return nil
}
