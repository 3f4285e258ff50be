package core

// sendChunked sends p to peer in frames of at most chunkBytes (one frame if p is
// empty); each frame's header offset is its byte offset within p.
func (e *exec) sendChunked(peer int, p []byte) error {
	nch := max(1, ceilDiv(len(p), e.chunkBytes))
	for j := 0; j < nch; j++ {
		lo, hi := split(len(p), nch, j)
		if err := e.send(peer, lo, p[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// recvChunked receives what sendChunked sent.
func (e *exec) recvChunked(peer int, p []byte) error {
	nch := max(1, ceilDiv(len(p), e.chunkBytes))
	for j := 0; j < nch; j++ {
		lo, hi := split(len(p), nch, j)
		if err := e.recv(peer, lo, p[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}
