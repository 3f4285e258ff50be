package cuda

import "fmt"

// AlltoAllv enqueues on st: rank p's block for this rank (recvBytes[p] bytes) lands
// at recv+recvOff[p], and this rank's block for rank p (sendBytes[p] bytes at
// send+sendOff[p]) at p's recv, for every rank p. The counts differ per rank, so no
// rank knows how many rounds of the collective scratch the others need: the blocks
// go as one group of point-to-point messages (P2P), paced per pair, and the own
// block as a device copy. sendBytes[p] on this rank must equal recvBytes[this rank]
// on p.
func (s *Shared) AlltoAllv(st Stream, send uintptr, sendBytes, sendOff []int, recv uintptr, recvBytes, recvOff []int) error {
	for _, a := range [][]int{sendBytes, sendOff, recvBytes, recvOff} {
		if len(a) != s.nranks {
			return fmt.Errorf("cuda: alltoallv wants %d counts and displacements, got %d", s.nranks, len(a))
		}
	}
	if sendBytes[s.rank] != recvBytes[s.rank] {
		return fmt.Errorf("cuda: alltoallv: this rank sends itself %d bytes but expects %d", sendBytes[s.rank], recvBytes[s.rank])
	}
	sendEnd, recvEnd := span(sendBytes, sendOff), span(recvBytes, recvOff)
	if sendEnd > 0 && recvEnd > 0 && send < recv+uintptr(recvEnd) && recv < send+uintptr(sendEnd) {
		return fmt.Errorf("cuda: alltoallv's send and receive buffers overlap, which the device path does not take: the blocks go out and come in chunk by chunk")
	}
	ops := make([]P2POp, 0, 2*s.nranks)
	for p := range s.nranks {
		if p != s.rank {
			ops = append(ops, P2POp{Peer: p, Buf: send + uintptr(sendOff[p]), Bytes: sendBytes[p], Stream: st})
		}
	}
	for p := range s.nranks {
		if p != s.rank {
			ops = append(ops, P2POp{Recv: true, Peer: p, Buf: recv + uintptr(recvOff[p]), Bytes: recvBytes[p], Stream: st})
		}
	}
	if err := s.P2P(ops); err != nil {
		return err
	}
	n := sendBytes[s.rank]
	if n == 0 {
		return nil
	}
	return s.d.Do(s.ctx, func() error {
		return s.d.MemcpyDtoD(recv+uintptr(recvOff[s.rank]), send+uintptr(sendOff[s.rank]), n, st)
	})
}

// span is how many bytes the blocks of counts at offs reach.
func span(counts, offs []int) int {
	end := 0
	for i, n := range counts {
		if n > 0 {
			end = max(end, offs[i]+n)
		}
	}
	return end
}

// Barrier enqueues on st a barrier among the ranks' streams: work enqueued on st
// after it runs once every rank's stream has reached its barrier (every rank's work
// before it has run). It is one round of the collectives' flags, with no data:
// each stream writes its ready flag and waits for every rank's.
func (s *Shared) Barrier(st Stream) error {
	return s.run(func() error {
		r, err := s.begin(st)
		if err != nil {
			return err
		}
		if err := r.post(flagReady); err != nil {
			return err
		}
		if err := r.waitAll(flagReady, r.n); err != nil {
			return err
		}
		return r.post(flagReadDone)
	})
}
