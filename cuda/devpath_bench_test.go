package cuda_test

import (
	"sync"
	"testing"
	"time"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
)

// BenchmarkDevicePathEnqueue8B is the host cost of one 8-byte all_reduce on the device
// path, two ranks of this process on one fake device: the time to enqueue its copies,
// kernel launches and flags (the call returns then; the streams drain at the end).
func BenchmarkDevicePathEnqueue8B(b *testing.B) {
	d, f := open(b)
	f.SetDelay(0, 0)
	defer f.SetDelay(0, 200)
	id, err := core.NewUniqueID()
	if err != nil {
		b.Fatal(err)
	}
	const nranks = 2
	type rank struct {
		sh   *cuda.Shared
		k    cuda.Reducer
		s    uintptr
		buf  uintptr
		comm *core.Comm
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
			s := f.Stream(0)
			ctx, err := d.StreamContext(driver.Stream(s))
			if err != nil {
				errs[r] = err
				return
			}
			sh, err := cuda.NewShared(d, ctx, r, nranks, 1<<20, hostExchange(c))
			if err != nil {
				errs[r] = err
				return
			}
			k, err := kernels.Load(d, ctx)
			ranks[r] = rank{sh: sh, k: k, s: s, buf: f.Malloc(0, 8), comm: c}
			errs[r] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rk := ranks[r]
			for range b.N {
				if err := rk.sh.AllReduce(driver.Stream(rk.s), rk.k, rk.buf, rk.buf, 2, core.Float32, core.Sum); err != nil {
					errs[r] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	for r := range ranks {
		f.Drain(ranks[r].s)
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
