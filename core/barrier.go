package core

// barrierDissemination returns once every rank has entered the barrier: in round k
// each rank signals rank r+2^k and waits for rank r-2^k, so after ceil(log2(n)) rounds
// every rank has heard, directly or not, from every other.
func (e *exec) barrierDissemination() error {
	n, r := e.nranks, e.rank
	for k := 1; k < n; k <<= 1 {
		if err := e.sendRecv(mod(r+k, n), nil, mod(r-k, n), nil); err != nil {
			return err
		}
	}
	return nil
}
