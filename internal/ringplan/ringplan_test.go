package ringplan

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAllReducePlanSums carries the plan out on counters: every element of every rank
// counts how many times each rank's input went into it. After the steps, every rank
// must hold each input exactly once in every element (a segment sent at the wrong step
// counts one twice or not at all), and a step that Finishes must have just completed
// its segment.
func TestAllReducePlanSums(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for _, count := range []int{0, 1, n - 1, n, 7*n + 3, 1000} {
			for _, chunkBytes := range []int{1, 8, 64, 1 << 20} {
				plans := make([]AllReduce, n)
				bufs := make([][][]int, n) // bufs[r][elem][input rank]
				for r := range n {
					plans[r] = NewAllReduce(n, r, count, 4, chunkBytes)
					bufs[r] = make([][]int, count)
					for e := range bufs[r] {
						bufs[r][e] = make([]int, n)
						bufs[r][e][r] = 1
					}
				}
				covered := make([]int, count)
				p0 := plans[0]
				for seg := range n {
					for j := range p0.Chunks {
						lo, hi := p0.Chunk(seg, j)
						for e := lo / 4; e < hi/4; e++ {
							covered[e]++
						}
					}
				}
				for e, c := range covered {
					require.Equal(t, 1, c, "n=%d count=%d: element %d in %d chunks", n, count, e, c)
				}
				for s := range p0.Steps() {
					next := make([][][]int, n)
					for r := range n {
						next[r] = clone(bufs[r])
					}
					for r, p := range plans {
						prev := plans[p.Prev()]
						require.Equal(t, prev.SendSeg(s), p.RecvSeg(s), "n=%d step %d rank %d", n, s, r)
						if s+1 < p.Steps() {
							require.Equal(t, p.RecvSeg(s), p.SendSeg(s+1), "n=%d step %d rank %d", n, s, r)
						}
						for j := range p.Chunks {
							lo, hi := p.Chunk(p.RecvSeg(s), j)
							for e := lo / 4; e < hi/4; e++ {
								for q := range n {
									in := bufs[p.Prev()][e][q]
									if p.Reduces(s) {
										next[r][e][q] += in
									} else {
										next[r][e][q] = in
									}
								}
								if p.Finishes(s) {
									require.Equal(t, ones(n), next[r][e], "n=%d step %d rank %d elem %d", n, s, r, e)
								}
							}
						}
					}
					bufs = next
				}
				for r := range n {
					for e := range count {
						require.Equal(t, ones(n), bufs[r][e], "n=%d count=%d chunk=%d: rank %d element %d", n, count, chunkBytes, r, e)
					}
				}
			}
		}
	}
}

func clone(b [][]int) [][]int {
	c := make([][]int, len(b))
	for i := range b {
		c[i] = append([]int(nil), b[i]...)
	}
	return c
}

func ones(n int) []int {
	o := make([]int, n)
	for i := range o {
		o[i] = 1
	}
	return o
}
