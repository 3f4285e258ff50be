package staged_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/staged"
)

// BenchmarkStaged8B is the host time of one 8-byte staged operation on the fake
// driver with no copy delay: stage, wait for the copy to the host (Before: the
// cuEventQuery loop), queue the copy back (After). What the wait costs beyond the
// copies themselves is the loop's pacing: sleeping at once costs a timer's rounding.
func BenchmarkStaged8B(b *testing.B) {
	d, f := cudatest.Load(b)
	f.SetDelay(0, 0)
	defer f.SetDelay(0, 200)
	s := f.Stream(7)
	ctx, err := d.StreamContext(driver.Stream(s))
	if err != nil {
		b.Fatal(err)
	}
	buf := f.Malloc(7, 8)
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "x", Ptr: buf, Bytes: 8, In: true, Out: true}})
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

// stagedBenchBytes is the operation the staged benchmarks run: 64 MiB of float32.
const stagedBenchBytes = 64 << 20

// hostWork stands in for a chunk's host part (the network and the host algorithm): one
// pass over the chunk that reads and writes every element.
func hostWork(b []byte) {
	f := floats(b)
	for i := range f {
		f[i] += 1
	}
}

// stagedBenchRates are the copy rates the staged benchmarks run at: copies that cost
// only the memcpy the fake does (0), and copies that also take their size at 2 GiB/s
// without using a CPU, as a GPU's copy engine would (the pinned copies of the H100 run
// at 47-54 GB/s; the fake is slowed so that the copies matter beside the host work).
var stagedBenchRates = []uint{0, 2048}

// BenchmarkStagedWhole is the staged path before pipelining: the whole buffer copied to
// the host and waited for, the host part, the whole buffer copied back and waited for.
func BenchmarkStagedWhole(b *testing.B) {
	for _, rate := range stagedBenchRates {
		b.Run(fmt.Sprintf("copyMiBps=%d", rate), func(b *testing.B) { stagedBench(b, rate, false, 0) })
	}
}

// BenchmarkStagedPipelined is the same operation pipelined in 4 MiB chunks
// (StageChunked): the copies of other chunks run while the host works on one. Its
// pinned memory is the whole operation's, or bounded (pinned=16MiB: a ring of 4 chunks;
// 8MiB: of 2), the copies to the host of a chunk waiting for the copies back of the
// chunk before it in its slot.
func BenchmarkStagedPipelined(b *testing.B) {
	for _, rate := range stagedBenchRates {
		b.Run(fmt.Sprintf("copyMiBps=%d", rate), func(b *testing.B) { stagedBench(b, rate, true, 0) })
		for _, limit := range []int{16 << 20, 8 << 20} {
			b.Run(fmt.Sprintf("copyMiBps=%d/pinned=%dMiB", rate, limit>>20), func(b *testing.B) { stagedBench(b, rate, true, limit) })
		}
	}
}

func stagedBench(b *testing.B, rate uint, pipelined bool, limit int) {
	d, f := cudatest.Load(b)
	f.SetDelay(0, 0)
	f.SetCopyRate(rate)
	defer f.SetDelay(0, 200)
	defer f.SetCopyRate(0)
	s := f.Stream(6)
	ctx, err := d.StreamContext(driver.Stream(s))
	if err != nil {
		b.Fatal(err)
	}
	buf := f.Malloc(6, stagedBenchBytes)
	pool := staged.NewPool(d)
	defer pool.Close(10 * time.Second)
	const count, per = stagedBenchBytes / 4, (4 << 20) / 4
	b.SetBytes(stagedBenchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		deadline := time.Now().Add(10 * time.Second)
		if !pipelined {
			st, err := pool.Stage(ctx, driver.Stream(s), []staged.Region{{Name: "x", Ptr: buf, Bytes: stagedBenchBytes, In: true, Out: true}})
			if err != nil {
				b.Fatal(err)
			}
			if err := st.Before(deadline); err != nil {
				b.Fatal(err)
			}
			hostWork(st.Host[0])
			if err := st.After(nil); err != nil {
				b.Fatal(err)
			}
			f.Drain(s)
			continue
		}
		st, err := pool.StageChunked(ctx, driver.Stream(s), []staged.Piece{{Name: "x", Ptr: buf, Blocks: 1, In: true, Out: true}}, count, 4, per, limit)
		if err != nil {
			b.Fatal(err)
		}
		if err := st.SetIssued(st.Chunks()); err != nil {
			b.Fatal(err)
		}
		for k := 0; k < st.Chunks(); k++ {
			if err := st.BeforeChunk(k, deadline); err != nil {
				b.Fatal(err)
			}
			hostWork(st.ChunkHost(k)[0])
			if err := st.AfterChunk(k, nil); err != nil {
				b.Fatal(err)
			}
		}
		f.Drain(s)
	}
}
