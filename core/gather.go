package core

// gatherDirect gathers every rank's block (blockBytes of send) into recv on root,
// rank i's at offset i*blockBytes: each rank sends straight to root, which receives
// from root+1, root+2, ... in turn and copies its own block locally. recv is read
// and written only on root.
func (e *exec) gatherDirect(send, recv []byte, blockBytes, root int) error {
	n, r := e.nranks, e.rank
	if r != root {
		return e.sendChunked(root, send[:blockBytes])
	}
	copyIfDistinct(recv[r*blockBytes:(r+1)*blockBytes], send[:blockBytes])
	for i := 1; i < n; i++ {
		p := mod(root+i, n)
		if err := e.recvChunked(p, recv[p*blockBytes:(p+1)*blockBytes]); err != nil {
			return err
		}
	}
	return nil
}
