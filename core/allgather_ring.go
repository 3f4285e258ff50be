package core

// allGatherRing gathers every rank's block of blockBytes into buf (n blocks, rank i's at
// offset i*blockBytes; this rank's block is already in place). At step s rank r sends
// block r-s to rank r+1 and receives block r-s-1 from rank r-1; each block is cut into
// chunks and a chunk is forwarded as soon as it has arrived.
func (e *exec) allGatherRing(buf []byte, blockBytes int) error {
	n, r := e.nranks, e.rank
	next, prev := mod(r+1, n), mod(r-1, n)
	nch := max(1, ceilDiv(blockBytes, e.chunkBytes))
	chunk := func(block, j int) (int, int) {
		lo, hi := split(blockBytes, nch, j)
		return block*blockBytes + lo, block*blockBytes + hi
	}
	units := (n - 1) * nch
	return e.pipeline(pipe{
		nsend: units, nrecv: units,
		need: func(u int) int { return u - nch + 1 },
		send: func(u int) error {
			lo, hi := chunk(mod(r-u/nch, n), u%nch)
			return e.sendKept(next, lo, buf[lo:hi])
		},
		recv: func(u int) error {
			lo, hi := chunk(mod(r-u/nch-1, n), u%nch)
			return e.recv(prev, lo, buf[lo:hi])
		},
	})
}
