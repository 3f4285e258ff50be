package core

// The public operations. Each checks its arguments, enqueues the operation and returns
// a Request at once; the executor runs operations in issue order. Buffers are the
// caller's memory and must stay valid, and unmodified by the caller, until the request
// completes. send and recv may be the same buffer (in place).

// AllReduce reduces count elements of send across all ranks with redop and leaves the
// result, identical on every rank, in recv.
func (c *Comm) AllReduce(send, recv []byte, count int, dt DataType, redop RedOp) (*Request, error) {
	if err := checkReduce(KindAllReduce, dt, redop); err != nil {
		return nil, err
	}
	if err := checkBuffers(KindAllReduce, dt, count, send, count, recv, count); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindAllReduce, send: send, recv: recv, count: count, dtype: dt, redop: redop, root: -1})
}

// Broadcast copies count elements of send on root into recv on every rank. send is
// read only on the root.
func (c *Comm) Broadcast(send, recv []byte, count int, dt DataType, root int) (*Request, error) {
	if err := checkType(KindBroadcast, dt); err != nil {
		return nil, err
	}
	if root < 0 || root >= c.nranks {
		return nil, invalidf("broadcast: root %d is out of range for %d ranks", root, c.nranks)
	}
	sendCount := count
	if c.rank != root {
		sendCount = 0
	}
	if err := checkBuffers(KindBroadcast, dt, count, send, sendCount, recv, count); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindBroadcast, send: send, recv: recv, count: count, dtype: dt, root: root})
}

// AllGather gathers sendCount elements from every rank into recv, rank i's at element
// offset i*sendCount. In place: send is recv's own block.
func (c *Comm) AllGather(send, recv []byte, sendCount int, dt DataType) (*Request, error) {
	if err := checkType(KindAllGather, dt); err != nil {
		return nil, err
	}
	if err := checkBuffers(KindAllGather, dt, sendCount, send, sendCount, recv, sendCount*c.nranks); err != nil {
		return nil, err
	}
	return c.enqueue(&op{kind: KindAllGather, send: send, recv: recv, count: sendCount, dtype: dt, root: -1})
}

// Barrier completes once every rank has called Barrier.
func (c *Comm) Barrier() (*Request, error) {
	return c.enqueue(&op{kind: KindBarrier, root: -1})
}

func checkType(k Kind, dt DataType) error {
	if !dt.Valid() {
		return invalidf("%s: unknown data type %d", k, uint8(dt))
	}
	return nil
}

// checkReduce rejects the (dt, redop) pairs that CheckReduction does, naming k.
func checkReduce(k Kind, dt DataType, redop RedOp) error {
	return checkReduction(k.String(), dt, redop)
}

func checkBuffers(k Kind, dt DataType, count int, send []byte, sendCount int, recv []byte, recvCount int) error {
	es := dt.Size()
	if count < 0 {
		return invalidf("%s: negative count %d", k, count)
	}
	if len(send) < sendCount*es {
		return invalidf("%s: send buffer holds %d bytes, need %d (%d x %s)", k, len(send), sendCount*es, sendCount, dt)
	}
	if len(recv) < recvCount*es {
		return invalidf("%s: receive buffer holds %d bytes, need %d (%d x %s)", k, len(recv), recvCount*es, recvCount, dt)
	}
	return nil
}
