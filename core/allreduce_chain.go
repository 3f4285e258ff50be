package core

// allReduceChain reduces buf (count elements) across all ranks in place along the
// chain of ring neighbours: a pipelined chain reduce into rank 0 (reduceChain: n-1 ->
// ... -> 1 -> 0), then a pipelined chain broadcast from it (broadcastChain: 0 -> 1 ->
// ... -> n-1). Every rank sends and receives about two messages per chunk, where the
// ring's send 2(n-1) of a tenth of the size, so a small buffer over very many ranks
// costs n times fewer messages (1,024 ranks: 2 per rank instead of 2,046), over the same
// two links per rank; the price is the whole buffer on every hop, so it suits messages
// where the count of messages, not their bytes, is the cost.
func (e *exec) allReduceChain(buf []byte, count int, dt DataType, op RedOp, work []byte) error {
	if err := e.reduceChain(buf, buf, count, dt, op, 0, work); err != nil {
		return err
	}
	return e.broadcastChain(buf, 0)
}
