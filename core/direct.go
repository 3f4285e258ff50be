package core

import "sync"

// The direct (one-shot) algorithms: every rank sends its data straight to every peer in
// one step, so an operation costs one message latency whatever the rank count. They
// move (n-1) times the bytes of a ring, so the cost model keeps them to small messages
// on one host, where a message is a copy through shared memory.

// sendToAll sends p (at offset off) to every peer, starting with the next rank so that
// peers are not all hit by the same sender first, while the caller receives.
func (e *exec) sendToAll(wg *sync.WaitGroup, off int, p []byte) {
	e.guard.Go("direct sender", wg, e.fail, func() {
		for i := 1; i < e.nranks; i++ {
			if err := e.send(mod(e.rank+i, e.nranks), off, p); err != nil {
				e.fail(err)
				return
			}
		}
	})
}

// allReduceDirect reduces buf across all ranks in place: every rank sends buf to every
// peer, receives every peer's buffer and reduces all n of them in rank order
// (x0 op x1 op ... op xn-1), so every rank computes bit-identical results. work holds
// the running result and one received buffer (2*len(buf) bytes).
func (e *exec) allReduceDirect(buf []byte, dt DataType, op RedOp, work []byte) error {
	acc, tmp := work[:len(buf)], work[len(buf):2*len(buf)]
	var wg sync.WaitGroup
	defer e.joinOnPanic(nil, &wg)
	e.sendToAll(&wg, 0, buf)
	for j := 0; j < e.nranks && e.result() == nil; j++ {
		src := buf
		if j != e.rank {
			if err := e.recv(j, 0, tmp); err != nil {
				e.fail(err)
				break
			}
			src = tmp
		}
		if j == 0 {
			copy(acc, src)
		} else if err := ReduceInto(acc, src, dt, op); err != nil {
			e.fail(err)
			break
		}
	}
	wg.Wait() // buf is still being sent until then
	if err := e.result(); err != nil {
		return err
	}
	copy(buf, acc)
	if op == Avg {
		return DivideBy(buf, dt, e.nranks)
	}
	return nil
}

// allGatherDirect gathers every rank's block of blockBytes into buf (rank i's at
// i*blockBytes; this rank's is in place): every rank sends its block to every peer and
// receives each peer's block into place.
func (e *exec) allGatherDirect(buf []byte, blockBytes int) error {
	var wg sync.WaitGroup
	defer e.joinOnPanic(nil, &wg)
	r := e.rank
	e.sendToAll(&wg, r*blockBytes, buf[r*blockBytes:(r+1)*blockBytes])
	for i := 1; i < e.nranks && e.result() == nil; i++ {
		j := mod(r-i, e.nranks)
		if err := e.recv(j, j*blockBytes, buf[j*blockBytes:(j+1)*blockBytes]); err != nil {
			e.fail(err)
		}
	}
	wg.Wait()
	return e.result()
}
