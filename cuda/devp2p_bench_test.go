package cuda_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
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
	d, f := open(b)
	f.SetDelay(0, 0)
	defer f.SetDelay(0, 200)
	id, err := core.NewUniqueID()
	if err != nil {
		b.Fatal(err)
	}
	const nranks = 2
	type rank struct {
		sh        *cuda.Shared
		s         driver.Stream
		send, buf uintptr
		comm      *core.Comm
	}
	ranks := make([]rank, nranks)
	var wg sync.WaitGroup
	errs := make([]error, nranks)
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := core.NewComm(id, nranks, r, core.Options{Timeout: time.Minute})
			if err != nil {
				errs[r] = err
				return
			}
			s := driver.Stream(f.Stream(0))
			ctx, err := d.StreamContext(s)
			if err != nil {
				errs[r] = err
				return
			}
			sh, err := cuda.NewShared(d, ctx, r, nranks, 1<<20, hostExchange(c))
			ranks[r] = rank{sh: sh, s: s, send: f.Malloc(0, 8), buf: f.Malloc(0, 8), comm: c}
			errs[r] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rk := ranks[r]
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
						errs[r] = err
						return
					}
				}
				if err := rk.sh.P2P(ops); err != nil {
					errs[r] = err
					return
				}
				if dop != nil {
					dop.OnGPU(done)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for r := range ranks {
		f.Drain(uintptr(ranks[r].s))
	}
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ranks[r].sh.Close(time.Minute); err != nil && errs[r] == nil {
				errs[r] = err
			}
			ranks[r].comm.Destroy()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}
