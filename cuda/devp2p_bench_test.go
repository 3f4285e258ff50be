package cuda_test

import (
	"testing"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
)

// BenchmarkDeviceP2PEnqueue8B is the host cost of one 8-byte exchange on the device
// path (a group of a send to the other rank and a receive from it), two ranks of this
// process on one fake device: the time to enqueue its copies and flags (the call
// returns then; the streams drain at the end). "recorded" adds what capi adds for the
// flight recorder: both operations issued to the communicator's recorder, then marked
// on the GPU.
func BenchmarkDeviceP2PEnqueue8B(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchP2PEnqueue(b, false) })
	b.Run("recorded", func(b *testing.B) { benchP2PEnqueue(b, true) })
}

func benchP2PEnqueue(b *testing.B, record bool) {
	benchDeviceRanks(b, 2, func(r int, rk benchRank) error {
		peer := 1 - r
		ops := []cuda.P2POp{{Peer: peer, Buf: rk.send, Bytes: 8, Stream: rk.s},
			{Recv: true, Peer: peer, Buf: rk.buf, Bytes: 8, Stream: rk.s}}
		done := func() (bool, error) { return true, nil }
		for range b.N {
			var dop *core.DeviceOp
			if record { // as capi's enqueueP2P builds it
				recs := make([]core.P2PRecord, len(ops))
				for i, o := range ops {
					recs[i] = core.P2PRecord{Recv: o.Recv, Peer: o.Peer, DType: core.Uint8, Count: o.Bytes}
				}
				var err error
				if dop, err = rk.comm.IssueDeviceP2P(recs); err != nil {
					return err
				}
			}
			if err := rk.sh.P2P(ops); err != nil {
				return err
			}
			if dop != nil {
				dop.OnGPU(done)
			}
		}
		return nil
	})
}
