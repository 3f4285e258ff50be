package core

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport/shm"
)

// zcComms builds n communicators over shared-memory links that count as one host, with
// the zero-copy path on for every size (tweak may change that).
func zcComms(t testing.TB, n int, tweak func(*config)) []*Comm {
	t.Helper()
	comms := shmComms(t, n, 1<<16, func(c *config) {
		c.chunkBytes, c.zeroCopy, c.zeroCopyMin, c.traceSize = 1<<16, true, 1, 16
		if tweak != nil {
			tweak(c)
		}
	})
	host := make([]int, n)
	for r := range host {
		host[r] = r
	}
	for _, c := range comms {
		c.hosts = [][]int{host}
	}
	return comms
}

// shared returns n bytes at byte offset off of a new region of gonccl's shared memory,
// freed when the test ends.
func shared(t testing.TB, n, off int) []byte {
	t.Helper()
	r, err := shm.Alloc(n + off)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Free()) })
	return r.Mem[off : off+n : off+n]
}

// lastAlgo is the algorithm of c's last operation, from its flight recorder.
func lastAlgo(c *Comm) Algo {
	e := c.Trace()
	return e[len(e)-1].Algo
}

// requireAlgo checks that every rank ran its last operation with algo (or, with
// not, with anything else).
func requireAlgo(t *testing.T, comms []*Comm, algo Algo, not bool, msg string) {
	t.Helper()
	for _, c := range comms {
		if not {
			require.NotEqual(t, algo, lastAlgo(c), "%s: rank %d", msg, c.rank)
		} else {
			require.Equal(t, algo, lastAlgo(c), "%s: rank %d", msg, c.rank)
		}
	}
}

// zcAllReduce runs an all_reduce of count elements on every rank, in place or from a
// separate send buffer, with buffers from alloc(rank, bytes), and checks the result.
func zcAllReduce(t *testing.T, comms []*Comm, count int, dt DataType, op RedOp, inPlace bool, seed int64,
	alloc func(rank, n int) []byte, name string) {
	t.Helper()
	n := len(comms)
	ins, sends, outs := make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for r := range ins {
		ins[r] = inputs(dt, op, count, r, seed)
		sends[r] = alloc(r, len(ins[r]))
		copy(sends[r], ins[r])
		outs[r] = sends[r]
		if !inPlace {
			outs[r] = alloc(r, len(ins[r]))
		}
	}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(sends[c.rank], outs[c.rank], count, dt, op)
	})
	want := reference(dt, op, ins, count)
	for r := range comms {
		require.NoError(t, errs[r], name)
		requireReduced(t, dt, op, n, want, outs[r], count, fmt.Sprintf("%s rank %d", name, r))
		if !inPlace {
			require.Equal(t, ins[r], sends[r], "%s: rank %d's input changed", name, r)
		}
	}
	// Bit-identical on every rank (each shard is reduced once, by one rank).
	for r := 1; r < n; r++ {
		require.Equal(t, outs[0], outs[r], "%s: ranks 0 and %d differ", name, r)
	}
}

// Every reducing type and operation, 2-4 ranks, in place and not, on buffers at an
// offset inside their regions, with counts that leave some ranks' shards empty: the
// zero-copy path runs (the flight recorder says so) and equals the reference.
func TestZeroCopyAllReduce(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		comms := zcComms(t, n, nil)
		for ci, count := range []int{1, 7, 1000, 40000} {
			for _, dt := range allTypes {
				for _, op := range allOps {
					if !reducible(dt, op) || count == 40000 && dt != Float32 && dt != Bfloat16 {
						continue
					}
					inPlace := (ci+int(dt)+int(op))%2 == 0
					off := (ci % 3) * dt.Size()
					name := fmt.Sprintf("n=%d all_reduce %s %s count=%d in-place=%v", n, dt, op, count, inPlace)
					zcAllReduce(t, comms, count, dt, op, inPlace, int64(ci), func(_, k int) []byte { return shared(t, k, off) }, name)
					requireAlgo(t, comms, AlgoZeroCopy, false, name)
				}
			}
		}
	}
}

// reduce_scatter, all_gather and broadcast (every root), in place and not.
func TestZeroCopyOtherCollectives(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		comms := zcComms(t, n, nil)
		for ci, count := range []int{1, 5, 3000} {
			for _, dt := range []DataType{Float32, Bfloat16, Int64, Uint8} {
				es, block := dt.Size(), count*dt.Size()
				inPlace := ci%2 == 0
				name := fmt.Sprintf("n=%d %s count=%d in-place=%v", n, dt, count, inPlace)

				ins, sends, outs := make([][]byte, n), make([][]byte, n), make([][]byte, n)
				for r := range ins {
					ins[r] = inputs(dt, Sum, n*count, r, int64(ci))
					sends[r] = shared(t, n*block, es)
					copy(sends[r], ins[r])
					if inPlace {
						outs[r] = sends[r][r*block : (r+1)*block]
					} else {
						outs[r] = shared(t, block, 0)
					}
				}
				errs := onAll(t, comms, func(c *Comm) (*Request, error) {
					return c.ReduceScatter(sends[c.rank], outs[c.rank], count, dt, Sum)
				})
				want := reference(dt, Sum, ins, n*count)
				for r := range comms {
					require.NoError(t, errs[r], "reduce_scatter "+name)
					require.Equal(t, want[r*block:(r+1)*block], outs[r], "reduce_scatter %s rank %d", name, r)
				}
				requireAlgo(t, comms, AlgoZeroCopy, false, "reduce_scatter "+name)

				for r := range ins {
					outs[r] = shared(t, n*block, 0)
					sends[r] = shared(t, block, 0)
					if inPlace {
						sends[r] = outs[r][r*block : (r+1)*block]
					}
					copy(sends[r], ins[r][:block])
				}
				errs = onAll(t, comms, func(c *Comm) (*Request, error) {
					return c.AllGather(sends[c.rank], outs[c.rank], count, dt)
				})
				for r := range comms {
					require.NoError(t, errs[r], "all_gather "+name)
					for p := range comms {
						require.Equal(t, ins[p][:block], outs[r][p*block:(p+1)*block], "all_gather %s rank %d block %d", name, r, p)
					}
				}
				requireAlgo(t, comms, AlgoZeroCopy, false, "all_gather "+name)

				for root := range comms {
					for r := range ins {
						outs[r] = shared(t, block, 0)
						sends[r] = outs[r]
						if !inPlace {
							sends[r] = shared(t, block, 0)
						}
						copy(sends[r], ins[r][:block])
					}
					errs = onAll(t, comms, func(c *Comm) (*Request, error) {
						return c.Broadcast(sends[c.rank], outs[c.rank], count, dt, root)
					})
					for r := range comms {
						require.NoError(t, errs[r], "broadcast "+name)
						require.Equal(t, ins[root][:block], outs[r], "broadcast %s root %d rank %d", name, root, r)
					}
					requireAlgo(t, comms, AlgoZeroCopy, false, fmt.Sprintf("broadcast %s root %d", name, root))
				}
			}
		}
	}
}

// One rank's buffer in ordinary memory, an operation below the
// threshold, or GONCCL_ZEROCOPY=0 on every rank: every rank takes the usual path, and
// the result is right.
func TestZeroCopyFallsBack(t *testing.T) {
	const count = 5000
	for _, n := range []int{2, 4} {
		comms := zcComms(t, n, nil)
		for odd := 0; odd < n; odd++ {
			alloc := func(r, k int) []byte {
				if r == odd {
					return make([]byte, k)
				}
				return shared(t, k, 0)
			}
			name := fmt.Sprintf("n=%d rank %d ordinary", n, odd)
			zcAllReduce(t, comms, count, Float32, Sum, odd%2 == 0, 1, alloc, name)
			requireAlgo(t, comms, AlgoZeroCopy, true, name)
		}
		for _, tweak := range []func(*config){
			func(c *config) { c.zeroCopyMin = 1 << 30 },
			func(c *config) { c.zeroCopy = false },
		} {
			off := zcComms(t, n, tweak)
			zcAllReduce(t, off, count, Float32, Sum, true, 2, func(_, k int) []byte { return shared(t, k, 0) }, "off")
			requireAlgo(t, off, AlgoZeroCopy, true, fmt.Sprintf("n=%d threshold or GONCCL_ZEROCOPY=0", n))
		}
	}
}

// reuseAtOnce runs iters back-to-back in-place all_reduces of count float32s on each
// rank's one shared buffer; each rank, as soon as an operation returns, checks its
// result and writes the next input over it. It returns how many results were wrong:
// a rank that returned before its peers finished reading its input or writing its
// output would see (or cause) a wrong one.
func reuseAtOnce(t *testing.T, comms []*Comm, count, iters int) (wrong int) {
	t.Helper()
	n := len(comms)
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = shared(t, count*4, 0)
	}
	value := func(r, it, i int) float64 { return float64((r+1)*(it+1) + i%7) }
	bad := make([]int, n)
	errs := make([]error, n)
	done := make(chan struct{})
	for _, c := range comms {
		go func() {
			defer func() { done <- struct{}{} }()
			r := c.rank
			// Each pass starts at the next rank's shard, which that rank reads and
			// writes in this rank's buffer: a rank that returned too early touches
			// it while its owner may still be at work.
			start := (r + 1) % n * (count / n)
			for it := 0; it < iters; it++ {
				for k := 0; k < count; k++ {
					i := (k + start) % count
					putElem(bufs[r], Float32, i, value(r, it, i))
				}
				req, err := c.AllReduce(bufs[r], bufs[r], count, Float32, Sum)
				if err == nil {
					_, err = req.Wait(-1)
				}
				if err != nil {
					errs[r] = err
					return
				}
				for k := 0; k < count; k++ {
					i := (k + start) % count
					want := 0.0
					for p := 0; p < n; p++ {
						want += value(p, it, i)
					}
					if getElem(bufs[r], Float32, i) != want {
						bad[r]++
						break
					}
				}
			}
		}()
	}
	for range comms {
		<-done
	}
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		wrong += bad[r]
	}
	return wrong
}

// Buffers reused the moment an operation returns stay right: the done step holds
// every rank until its peers are finished with its buffers. The same loop with that
// step skipped (the skip-done fault) goes wrong, which shows the loop can tell.
func TestZeroCopyReuseAtOnce(t *testing.T) {
	const count, iters = 1 << 16, 30
	for _, n := range []int{2, 4} {
		require.Zero(t, reuseAtOnce(t, zcComms(t, n, nil), count, iters), "n=%d: wrong results", n)
		// The fault shows as a race between ranks, which a slow run (the race detector)
		// can lose a few times in a row: up to 5 loops until one sees it.
		faulty := zcComms(t, n, func(c *config) { c.zeroCopyFault = "skip-done" })
		wrong := 0
		for try := 0; try < 5 && wrong == 0; try++ {
			wrong = reuseAtOnce(t, faulty, count, iters)
		}
		require.NotZero(t, wrong, "n=%d: skipping the done step went unnoticed in 5 loops", n)
	}
}

// A step that leaves a peer's data out (the skip-peer fault) gives wrong results,
// which the checks above would catch.
func TestZeroCopyFaultIsCaught(t *testing.T) {
	for _, n := range []int{2, 3} {
		comms := zcComms(t, n, func(c *config) { c.zeroCopyFault = "skip-peer" })
		const count = 1000
		ins, bufs := make([][]byte, n), make([][]byte, n)
		for r := range ins {
			ins[r] = inputs(Float32, Sum, count, r, 3)
			bufs[r] = shared(t, len(ins[r]), 0)
			copy(bufs[r], ins[r])
		}
		errs := onAll(t, comms, func(c *Comm) (*Request, error) {
			return c.AllReduce(bufs[c.rank], bufs[c.rank], count, Float32, Sum)
		})
		want := reference(Float32, Sum, ins, count)
		for r := range comms {
			require.NoError(t, errs[r])
			require.NotEqual(t, want, bufs[r], "n=%d rank %d: the skip-peer fault went unnoticed", n, r)
		}
	}
}

// Mappings of peers' regions do not pile up: a rank that frees regions makes its
// peers let go of their mappings of them (and only of them: a region still alive stays
// mapped), and a communicator's end unmaps the rest.
func TestZeroCopyForgetsFreedRegions(t *testing.T) {
	const n, count = 2, 4096
	comms := zcComms(t, n, nil)
	base := countMaps(t)
	keep, other := make([][]byte, n), make([][]byte, n)
	for r := range keep {
		keep[r], other[r] = shared(t, count*4, 0), shared(t, count*4, 0)
	}
	allReduce := func(bufs [][]byte) {
		t.Helper()
		errs := onAll(t, comms, func(c *Comm) (*Request, error) {
			return c.AllReduce(bufs[c.rank], bufs[c.rank], count, Float32, Sum)
		})
		for r := range comms {
			require.NoError(t, errs[r])
		}
		require.Equal(t, AlgoZeroCopy, lastAlgo(comms[0]))
	}
	allReduce(keep)
	ref, ok := shm.FindRegion(keep[1])
	require.True(t, ok)
	kept := comms[0].zc.maps[zcKey{1, ref.ID}]
	require.NotNil(t, kept)
	for i := 0; i < 3*zcMaxMaps/2; i++ {
		regions := make([]*shm.Region, n)
		temp := make([][]byte, n)
		for r := range regions {
			var err error
			regions[r], err = shm.Alloc(count * 4)
			require.NoError(t, err)
			temp[r] = regions[r].Mem[:count*4]
		}
		allReduce(temp)
		for r := range regions {
			require.NoError(t, regions[r].Free())
		}
		allReduce(other) // frees seen while keep is not in use: keep stays mapped
		allReduce(keep)
		// Each rank's own two long-lived regions and its mappings of the peer's.
		require.Equal(t, 4*n, countMaps(t)-base, "iteration %d", i)
		require.Same(t, kept, comms[0].zc.maps[zcKey{1, ref.ID}], "iteration %d: a live region was mapped again", i)
	}
	for _, c := range comms {
		require.NoError(t, c.Destroy())
	}
	require.Equal(t, 2*n, countMaps(t)-base, "peers' mappings left after destroy")
}

// countMaps counts this process's mappings of shared-memory regions.
func countMaps(t testing.TB) int {
	t.Helper()
	m, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(m), shm.AllocName)
}

// A rank that never calls the operation (after one that ran zero-copy): the others
// fail at the deadline, and the one that waits for it directly (its parent in the
// describe step's tree, rank 0) names it. (Between processes the status query names
// it to every rank: tests/test_zerocopy.py.)
func TestZeroCopyMissingRankTimesOut(t *testing.T) {
	const n, count = 3, 4096
	comms := zcComms(t, n, func(c *config) { c.timeout = 300 * time.Millisecond })
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = shared(t, count*4, 0)
	}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(bufs[c.rank], bufs[c.rank], count, Float32, Sum)
	})
	for r := range comms {
		require.NoError(t, errs[r])
	}
	errs = onAll(t, comms[:n-1], func(c *Comm) (*Request, error) {
		return c.AllReduce(bufs[c.rank], bufs[c.rank], count, Float32, Sum)
	})
	for r := range comms[:n-1] {
		require.ErrorIs(t, errs[r], ErrTimeout, "rank %d", r)
	}
	require.ErrorContains(t, errs[0], fmt.Sprintf("waiting for rank %d", n-1))
}

// BenchmarkZeroCopy times an in-place float32 all_reduce over shared-memory links,
// 2, 4 and 8 ranks in this process: on ordinary buffers with the zero-copy path off,
// on ordinary buffers with it on (after the first operation it asks nothing: this is
// what the flag on the frames costs), and on shared buffers (the zero-copy path).
// Where shared beats ordinary-off is GONCCL_ZEROCOPY_THRESHOLD's crossover
// (docs/performance.md). BENCH_ZC_RANKS (e.g. "8") narrows the rank counts.
func BenchmarkZeroCopy(b *testing.B) {
	ranks := []int{2, 4, 8}
	if v := os.Getenv("BENCH_ZC_RANKS"); v != "" {
		ranks = nil
		for _, f := range strings.Fields(v) {
			var n int
			_, err := fmt.Sscan(f, &n)
			require.NoError(b, err)
			ranks = append(ranks, n)
		}
	}
	for _, n := range ranks {
		for _, size := range []int{64 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20} {
			for _, v := range []struct {
				name       string
				on, shared bool
			}{{"ordinary-off", false, false}, {"ordinary-on", true, false}, {"shared", true, true}} {
				b.Run(fmt.Sprintf("n=%d/%s/%dKiB", n, v.name, size>>10), func(b *testing.B) {
					comms := zcComms(b, n, func(c *config) { c.zeroCopy, c.chunkBytes = v.on, 1<<19 })
					bufs := make([][]byte, n)
					for r := range bufs {
						if v.shared {
							bufs[r] = shared(b, size, 0)
						} else {
							bufs[r] = make([]byte, size)
						}
					}
					b.SetBytes(int64(size))
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						errs := onAll(b, comms, func(c *Comm) (*Request, error) {
							return c.AllReduce(bufs[c.rank], bufs[c.rank], size/4, Float32, Sum)
						})
						for _, err := range errs {
							if err != nil {
								b.Fatal(err)
							}
						}
					}
				})
			}
		}
	}
}
