package core

import "github.com/gonccl/gonccl/internal/ringplan"

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
// send unit depends on the receive unit one step (nch units) earlier; and all-gather
// step n-1+k overwrites the segment reduce-scatter step k sent, so its receive unit
// waits for that send unit to have returned. Every rank
// forwards the owner's bytes of each finished segment, so all ranks end bit-identical.
func (e *exec) allReduceRing(buf []byte, count int, dt DataType, op RedOp) error {
	return e.ringSteps(buf, count, dt, op, 0, 2*(e.nranks-1))
}

// ringSteps runs steps first..last-1 of allReduceRing: 0..n-2 alone are a ring
// reduce-scatter (rank r then holds the reduction of segment r+1, split(count, n, r+1),
// divided by n for Avg), n-1..2n-3 alone the matching all-gather. The plan is
// ringplan's (shared with cuda's device stepper); this is its host stepper.
func (e *exec) ringSteps(buf []byte, count int, dt DataType, op RedOp, first, last int) error {
	p := ringplan.NewAllReduce(e.nranks, e.rank, count, dt.Size(), e.chunkBytes)
	nch := p.Chunks
	units := (last - first) * nch
	base := first * nch
	return e.pipeline(pipe{
		nsend: units, nrecv: units,
		need: func(u int) int { return u - nch + 1 },
		// All-gather step n-1+k receives segment r-k, which reduce-scatter step k sent:
		// it overwrites that chunk only once the send of it has returned.
		free: func(v int) int {
			k := (v+base)/nch - (p.N - 1)
			if k < first {
				return 0
			}
			return k*nch + (v+base)%nch + 1 - base
		},
		send: func(u int) error {
			u += base
			lo, hi := p.Chunk(p.SendSeg(u/nch), u%nch)
			return e.sendKept(p.Next(), lo, buf[lo:hi])
		},
		recv: func(u int) error {
			u += base
			s := u / nch
			lo, hi := p.Chunk(p.RecvSeg(s), u%nch)
			dst := buf[lo:hi]
			if !p.Reduces(s) {
				return e.recv(p.Prev(), lo, dst)
			}
			if err := e.recvReduce(p.Prev(), lo, dst, dt, op); err != nil {
				return err
			}
			if p.Finishes(s) && op == Avg {
				return DivideBy(dst, dt, p.N)
			}
			return nil
		},
	})
}
