package core

// scatterDirect sends block i (blockBytes at offset i*blockBytes of send on root)
// to rank i's recv: root sends to root+1, root+2, ... in turn and copies its own
// block locally. send is read only on root.
func (e *exec) scatterDirect(send, recv []byte, blockBytes, root int) error {
	n, r := e.nranks, e.rank
	if r != root {
		return e.recvChunked(root, recv[:blockBytes])
	}
	for i := 1; i < n; i++ {
		p := mod(root+i, n)
		if err := e.sendChunked(p, send[p*blockBytes:(p+1)*blockBytes]); err != nil {
			return err
		}
	}
	copyIfDistinct(recv[:blockBytes], send[r*blockBytes:(r+1)*blockBytes])
	return nil
}
