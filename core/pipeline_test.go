package core

import (
	"bytes"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/tcp"
	"github.com/stretchr/testify/require"
)

// heldLink is a link whose first Send returns only hold after its frame went out, and
// which counts the Sends whose buffer changed before they returned: a transport may
// read a send's buffer until Send returns.
type heldLink struct {
	transport.Link
	hold     time.Duration
	sends    atomic.Int32
	violated *atomic.Int32
}

func (l *heldLink) Send(h *transport.Header, p []byte, deadline time.Time) error {
	before := bytes.Clone(p)
	err := l.Link.Send(h, p, deadline)
	if l.sends.Add(1) == 1 {
		time.Sleep(l.hold)
	}
	if !bytes.Equal(before, p) {
		l.violated.Add(1)
	}
	return err
}

// A ring all_reduce's all-gather overwrites the segments its reduce-scatter sent. With
// 3 ranks, rank 0's first send (segment 0) may still be under way when rank 2, which
// finished segment 0 without needing anything more from rank 0, sends it back: the
// receive must wait for that send to return (pipe.free). It did not, and overwrote the
// buffer the send was still reading (seen under -race in CI as a race with write(2)).
func TestRingAllReduceOverwritesOnlyWhatWasSent(t *testing.T) {
	var violated atomic.Int32
	comms := commsOver(t, 3, func(c *config) { c.algo[KindAllReduce] = []Algo{AlgoRing}; c.llThreshold = 0 },
		func(i, j int) (transport.Link, transport.Link) {
			a, b := net.Pipe()
			var li transport.Link = tcp.NewStreamLink(j, a)
			if i == 0 {
				li = &heldLink{Link: li, hold: 300 * time.Millisecond, violated: &violated}
			}
			return li, tcp.NewStreamLink(i, b)
		})
	count := 3 * 1024 // one 4 KiB chunk per segment
	errs, outs, want := allReduceFloat32(t, comms, count, 11)
	for r := range comms {
		require.NoError(t, errs[r])
		require.Equal(t, want, outs[r], "rank %d", r)
	}
	require.Zero(t, violated.Load(), "rank 0 overwrote a buffer its send was still reading")
}
