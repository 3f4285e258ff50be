package staged

import "github.com/gonccl/gonccl/cuda/driver"

// BackStream is the stream a pipelined staging copies back on: gonccl's own, or the
// staging's where it has none.
func (s *Staging) BackStream() driver.Stream {
	if s.ch != nil && s.ch.back != 0 {
		return s.ch.back
	}
	return s.stream
}
