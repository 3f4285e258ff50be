package cuda_test

import (
	"testing"
	"time"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
)

// benchRank is one rank of a device-path benchmark, a goroutine of this process on
// fake device 0: its communicator, its scratch (1 MiB), stream and kernels, and two
// 8-byte device buffers.
type benchRank struct {
	comm      *core.Comm
	sh        *cuda.Shared
	s         driver.Stream
	k         *kernels.Kernels
	send, buf uintptr
}

// benchDeviceRanks sets up nranks such ranks with the fake's delays off, runs loop on
// every rank at once with the timer on (loop runs its b.N iterations), then drains
// their streams, closes their scratch and destroys their communicators.
func benchDeviceRanks(b *testing.B, nranks int, loop func(r int, rk benchRank) error) {
	d, f := open(b)
	f.SetDelay(0, 0)
	defer f.SetDelay(0, 200)
	id, err := core.NewUniqueID()
	if err != nil {
		b.Fatal(err)
	}
	ranks := make([]benchRank, nranks)
	inProcessRanks(b, nranks, func(r int) error {
		c, err := core.NewComm(id, nranks, r, core.Options{Timeout: time.Minute})
		if err != nil {
			return err
		}
		s := driver.Stream(f.Stream(0))
		ctx, err := d.StreamContext(s)
		if err != nil {
			return err
		}
		sh, err := cuda.NewShared(d, ctx, r, nranks, 1<<20, hostExchange(c))
		if err != nil {
			return err
		}
		k, err := kernels.Load(d, ctx)
		ranks[r] = benchRank{comm: c, sh: sh, s: s, k: k, send: f.Malloc(0, 8), buf: f.Malloc(0, 8)}
		return err
	})
	b.ReportAllocs()
	b.ResetTimer()
	inProcessRanks(b, nranks, func(r int) error { return loop(r, ranks[r]) })
	b.StopTimer()
	for _, rk := range ranks {
		f.Drain(uintptr(rk.s))
	}
	inProcessRanks(b, nranks, func(r int) error {
		defer ranks[r].comm.Destroy()
		return ranks[r].sh.Close(time.Minute)
	})
}
