package core

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// allReduceAllocs runs one all_reduce of nbytes on every rank of comms (over shared
// memory) and returns the heap allocations per operation, counted over the process
// (so over all ranks).
func allReduceAllocs(t testing.TB, comms []*Comm, nbytes int) float64 {
	bufs := make([][]byte, len(comms))
	for i := range bufs {
		bufs[i] = make([]byte, nbytes)
	}
	count := nbytes / 4
	run := func() {
		var wg sync.WaitGroup
		for i, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, err := c.AllReduce(bufs[i], bufs[i], count, Float32, Sum)
				if err == nil {
					_, err = req.Wait(-1)
				}
				if err != nil {
					panic(err)
				}
			}()
		}
		wg.Wait()
	}
	run()
	return testing.AllocsPerRun(20, run)
}

// The hot path allocates per operation, never per chunk: an all_reduce cut into 256
// chunks allocates no more than one of a single chunk (plus a small allowance for the
// runtime's own bookkeeping under load).
func TestAllReduceAllocationsDoNotGrowWithChunks(t *testing.T) {
	comms := shmComms(t, 2, 1<<20, func(c *config) { c.chunkBytes = 4096; c.algo[KindAllReduce] = []Algo{AlgoRing} })
	one := allReduceAllocs(t, comms, 2*4096)      // one chunk per segment
	many := allReduceAllocs(t, comms, 2*4096*256) // 256 chunks per segment
	t.Logf("allocs per all_reduce over 2 ranks: %.0f (1 chunk per segment), %.0f (256 chunks)", one, many)
	require.LessOrEqual(t, many, one+8, "allocations grow with the number of chunks")
}

// BenchmarkAllReduceShm: 2 ranks in this process over shared memory; reports allocs/op
// (over both ranks) and the bus bandwidth.
func BenchmarkAllReduceShm(b *testing.B) {
	for _, nbytes := range []int{8, 64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", nbytes), func(b *testing.B) {
			comms := shmComms(b, 2, 4<<20, func(c *config) { c.chunkBytes = 512 << 10; c.llThreshold = 64 << 10 })
			bufs := [][]byte{make([]byte, nbytes), make([]byte, nbytes)}
			b.ReportAllocs()
			b.SetBytes(int64(nbytes))
			b.ResetTimer()
			benchAllReduce(b, comms, bufs)
		})
	}
}

// BenchmarkAllReduceAlgos: the ring against recursive halving and doubling, n ranks in
// this process over shared memory (go test ./core -run ^$ -bench AllReduceAlgos).
func BenchmarkAllReduceAlgos(b *testing.B) {
	for _, n := range []int{4, 8, 16} {
		for _, nbytes := range []int{64 << 10, 1 << 20, 16 << 20} {
			for _, algo := range []Algo{AlgoRing, AlgoHalving} {
				b.Run(fmt.Sprintf("n=%d/bytes=%d/%s", n, nbytes, algo), func(b *testing.B) {
					comms := shmComms(b, n, 4<<20, func(c *config) {
						c.chunkBytes = 512 << 10
						c.algo[KindAllReduce] = []Algo{algo}
					})
					bufs := make([][]byte, n)
					for r := range bufs {
						bufs[r] = make([]byte, nbytes)
					}
					b.SetBytes(int64(nbytes))
					b.ResetTimer()
					benchAllReduce(b, comms, bufs)
				})
			}
		}
	}
}

// benchAllReduce runs b.N in-place float32 all_reduces of bufs[r] on every rank of comms
// at once.
func benchAllReduce(b *testing.B, comms []*Comm, bufs [][]byte) {
	for i := 0; i < b.N; i++ {
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, err := c.AllReduce(bufs[r], bufs[r], len(bufs[r])/4, Float32, Sum)
				if err == nil {
					_, err = req.Wait(-1)
				}
				if err != nil {
					panic(err)
				}
			}()
		}
		wg.Wait()
	}
}
