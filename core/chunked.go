package core

// sendChunked sends p to peer in frames of at most chunkBytes (one frame if p is
// empty); each frame's header offset is its byte offset within p.
func (e *exec) sendChunked(peer int, p []byte) error {
	return e.sendChunkedCount(peer, e.hdr.Count, p)
}

// recvChunked receives what sendChunked sent.
func (e *exec) recvChunked(peer int, p []byte) error {
	return e.recvChunkedCount(peer, e.hdr.Count, p)
}

// sendChunkedCount is sendChunked with count in every frame's header instead of the
// operation's (one pair's count in alltoallv).
func (e *exec) sendChunkedCount(peer int, count uint64, p []byte) error {
	nch := max(1, ceilDiv(len(p), e.chunkBytes))
	for j := 0; j < nch; j++ {
		lo, hi := split(len(p), nch, j)
		if err := e.sendCount(peer, count, lo, p[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}

// recvChunkedCount receives what sendChunkedCount sent.
func (e *exec) recvChunkedCount(peer int, count uint64, p []byte) error {
	nch := max(1, ceilDiv(len(p), e.chunkBytes))
	for j := 0; j < nch; j++ {
		lo, hi := split(len(p), nch, j)
		if err := e.recvCount(peer, count, lo, p[lo:hi]); err != nil {
			return err
		}
	}
	return nil
}
