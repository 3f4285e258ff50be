package devroute

import (
	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
)

// noteP2PSizes tells core the sizes of device-path sends and receives just enqueued,
// in the order they were (runDevice's enqueues run one at a time, in issue order,
// and a batch's messages to or from a peer match in batch order): core announces
// each send's size to its receiver, which compares it with its own receive's and
// breaks the communicator with a mismatch if they differ (core/devp2psize.go).
func noteP2PSizes(c *core.Comm, ops []cuda.P2POp) {
	for _, op := range ops {
		if op.Recv {
			c.NoteDeviceRecv(op.Peer, op.Bytes)
		} else {
			c.NoteDeviceSend(op.Peer, op.Bytes)
		}
	}
}

// p2pNoted enqueues ops (sh.P2P) and, once they are, notes their sizes.
func p2pNoted(c *core.Comm, sh *cuda.Shared, ops []cuda.P2POp) error {
	if err := sh.P2P(ops); err != nil {
		return err
	}
	noteP2PSizes(c, ops)
	return nil
}

// noteAlltoAllvSizes notes the blocks of a device-path alltoallv just enqueued,
// which go as one group of point-to-point messages (cuda.Shared.AlltoAllv): a block
// this rank sends rank p of another size than p's recvcounts for it is a mismatch
// too (sizes in bytes; the own block is checked before).
func noteAlltoAllvSizes(c *core.Comm, send, recv []int) {
	for p := range send {
		if p != c.Rank() {
			c.NoteDeviceSend(p, send[p])
			c.NoteDeviceRecv(p, recv[p])
		}
	}
}
