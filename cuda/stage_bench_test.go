package cuda_test

import (
	"testing"
	"time"

	"github.com/gonccl/gonccl/cuda"
)

// BenchmarkStaged8B is the host time of one 8-byte staged operation on the fake
// driver with no copy delay: stage, wait for the copy to the host (Before: the
// cuEventQuery loop), queue the copy back (After). What the wait costs beyond the
// copies themselves is the loop's pacing: sleeping at once costs a timer's rounding.
func BenchmarkStaged8B(b *testing.B) {
	d, f := open(b)
	f.SetDelay(0, 0)
	defer f.SetDelay(0, 200)
	s := f.Stream(7)
	ctx, err := d.StreamContext(cuda.Stream(s))
	if err != nil {
		b.Fatal(err)
	}
	buf := f.Malloc(7, 8)
	pool := cuda.NewPool(d)
	defer pool.Close(10 * time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := pool.Stage(ctx, cuda.Stream(s), []cuda.Region{{Name: "x", Ptr: buf, Bytes: 8, In: true, Out: true}})
		if err != nil {
			b.Fatal(err)
		}
		if err := st.Before(time.Now().Add(10 * time.Second)); err != nil {
			b.Fatal(err)
		}
		if err := st.After(nil); err != nil {
			b.Fatal(err)
		}
	}
}
