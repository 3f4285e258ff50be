package cuda_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
)

// BenchmarkDeviceP2PEnqueue8B is the host cost of one 8-byte exchange on the device
// path (a group of a send to the other rank and a receive from it), two ranks of this
// process on one fake device: the time to enqueue its copies and flags (the call
// returns then; the streams drain at the end).
func BenchmarkDeviceP2PEnqueue8B(b *testing.B) {
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
		s         cuda.Stream
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
			s := cuda.Stream(f.Stream(0))
			ctx, err := d.StreamContext(s)
			if err != nil {
				errs[r] = err
				return
			}
			sh, err := cuda.NewShared(d, ctx, r, nranks, 1<<20, func(rec []byte) ([]byte, error) {
				all := make([]byte, len(rec)*nranks)
				req, err := c.AllGather(rec, all, len(rec), core.Uint8)
				if err == nil {
					_, err = req.Wait(-1)
				}
				return all, err
			})
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
			for range b.N {
				if err := rk.sh.P2P(ops); err != nil {
					errs[r] = err
					return
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
