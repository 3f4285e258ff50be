package cuda_test

import (
	"testing"

	"github.com/gonccl/gonccl/core"
)

// BenchmarkDevicePathEnqueue8B is the host cost of one 8-byte all_reduce on the device
// path, two ranks of this process on one fake device: the time to enqueue its copies,
// kernel launches and flags (the call returns then; the streams drain at the end).
func BenchmarkDevicePathEnqueue8B(b *testing.B) {
	benchDeviceRanks(b, 2, func(_ int, rk benchRank) error {
		for range b.N {
			if err := rk.sh.AllReduce(rk.s, rk.k, rk.buf, rk.buf, 2, core.Float32, core.Sum); err != nil {
				return err
			}
		}
		return nil
	})
}
