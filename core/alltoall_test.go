package core

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

// elem is the value rank `from` sends to rank `to` at element i: unique per triple.
func elem(from, to, i int) uint64 { return uint64(from)<<48 | uint64(to)<<32 | uint64(i) }

func TestAlltoAll(t *testing.T) {
	for n := 1; n <= sweepRanks(); n++ {
		comms := memComms(t, n, nil)
		for _, count := range []int{0, 1, 7, 1000, 1<<17 + 3} {
			for _, inPlace := range []bool{false, true} {
				sends := make([][]byte, n)
				outs := make([][]byte, n)
				for r := range sends {
					sends[r] = make([]byte, n*count*8)
					for j := 0; j < n; j++ {
						for i := 0; i < count; i++ {
							putInt(sends[r], Uint64, j*count+i, int64(elem(r, j, i)))
						}
					}
					outs[r] = filled(n * count * 8)
					if inPlace {
						outs[r] = sends[r]
					}
				}
				errs := onAll(t, comms, func(c *Comm) (*Request, error) {
					return c.AlltoAll(sends[c.rank], outs[c.rank], count, Uint64)
				})
				name := fmt.Sprintf("n=%d count=%d in-place=%v", n, count, inPlace)
				for r := 0; r < n; r++ {
					require.NoError(t, errs[r], name)
					for from := 0; from < n; from++ {
						for i := 0; i < count; i++ {
							if got := uint64(getInt(outs[r], Uint64, from*count+i)); got != elem(from, r, i) {
								t.Fatalf("%s: rank %d element %d from rank %d: got %#x", name, r, i, from, got)
							}
						}
					}
				}
			}
		}
	}
}

func TestAlltoAllv(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for n := 1; n <= sweepRanks(); n++ {
		comms := memComms(t, n, nil)
		for trial, maxCount := range []int{0, 1, 7, 1000, 1 << 17} {
			// counts[i][j]: what rank i sends rank j; zero often.
			counts := make([][]int, n)
			for i := range counts {
				counts[i] = make([]int, n)
				for j := range counts[i] {
					if maxCount > 0 && rng.Intn(3) > 0 {
						counts[i][j] = rng.Intn(maxCount + 1)
					}
				}
			}
			type layout struct {
				sendCounts, sendDispls, recvCounts, recvDispls []int
				send, recv                                     []byte
			}
			ls := make([]layout, n)
			for r := range ls {
				l := &ls[r]
				l.sendCounts = counts[r]
				l.recvCounts = make([]int, n)
				for j := 0; j < n; j++ {
					l.recvCounts[j] = counts[j][r]
				}
				// Blocks in reverse peer order with gaps, so displacements matter.
				place := func(cs []int) ([]int, int) {
					d, end := make([]int, n), 0
					for j := n - 1; j >= 0; j-- {
						d[j] = end
						end += cs[j] + 1
					}
					return d, end
				}
				var sendLen, recvLen int
				l.sendDispls, sendLen = place(l.sendCounts)
				l.recvDispls, recvLen = place(l.recvCounts)
				l.send = make([]byte, 4*sendLen)
				for j := 0; j < n; j++ {
					for i := 0; i < l.sendCounts[j]; i++ {
						putInt(l.send, Uint32, l.sendDispls[j]+i, int64(uint32(elem(r, j, i))))
					}
				}
				l.recv = filled(4 * recvLen)
			}
			errs := onAll(t, comms, func(c *Comm) (*Request, error) {
				l := &ls[c.rank]
				return c.AlltoAllv(l.send, l.sendCounts, l.sendDispls, l.recv, l.recvCounts, l.recvDispls, Uint32)
			})
			name := fmt.Sprintf("n=%d trial=%d", n, trial)
			for r := 0; r < n; r++ {
				require.NoError(t, errs[r], name)
				l := &ls[r]
				want := filled(len(l.recv))
				for from := 0; from < n; from++ {
					for i := 0; i < l.recvCounts[from]; i++ {
						putInt(want, Uint32, l.recvDispls[from]+i, int64(uint32(elem(from, r, i))))
					}
				}
				require.Equal(t, want, l.recv, "%s rank %d", name, r)
			}
		}
	}
}

// TestAlltoAllvInPlace runs alltoallv with send and recv the same buffer.
func TestAlltoAllvInPlace(t *testing.T) {
	n := 3
	comms := memComms(t, n, nil)
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = make([]byte, 8*n)
		for j := 0; j < n; j++ {
			putInt(bufs[r], Uint64, j, int64(elem(r, j, 0)))
		}
	}
	ones, displs := []int{1, 1, 1}, []int{0, 1, 2}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AlltoAllv(bufs[c.rank], ones, displs, bufs[c.rank], ones, displs, Uint64)
	})
	for r := 0; r < n; r++ {
		require.NoError(t, errs[r])
		for j := 0; j < n; j++ {
			require.Equal(t, elem(j, r, 0), uint64(getInt(bufs[r], Uint64, j)))
		}
	}
}

func TestAlltoAllvMismatchFailsOnBothSides(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		// Over real sockets, whose buffers hold the count frames, so no rank's
		// diagnosis races the links' shutdown grace on a loaded machine.
		comms := initAll(t, n)
		t.Cleanup(func() {
			for _, c := range comms {
				_ = c.Abort()
			}
		})
		// Every pair sends 4 elements, except that rank 0 sends rank 1 five.
		errs := onAll(t, comms, func(c *Comm) (*Request, error) {
			sc, rc, d := make([]int, n), make([]int, n), make([]int, n)
			for j := range sc {
				sc[j], rc[j], d[j] = 4, 4, 5*j
			}
			if c.rank == 0 {
				sc[1] = 5
			}
			buf, out := make([]byte, 8*5*n), make([]byte, 8*5*n)
			return c.AlltoAllv(buf, sc, d, out, rc, d, Int64)
		})
		want := "alltoallv #1 (int64): mismatched operation: rank 0 sent 5 elements to rank 1, which expected 4"
		// The receiver always diagnoses it; the sender does too when it reads the
		// receiver's counts before the failed receiver shuts its links (with more than
		// two ranks that depends on the order of the pairwise steps), else it names
		// the rank it lost. Naming both sides on every rank is the reliability issue's.
		require.ErrorIs(t, errs[1], ErrMismatch, "n=%d rank 1", n)
		require.ErrorContains(t, errs[1], want, "n=%d rank 1", n)
		require.ErrorContains(t, errs[0], "rank 1", "n=%d rank 0", n)
		if n == 2 {
			require.ErrorContains(t, errs[0], want, "n=2 rank 0")
		}
		for r := 2; r < n; r++ {
			require.Error(t, errs[r], "n=%d rank %d", n, r)
		}
	}
}

func TestAlltoAllMismatchNamesBothSides(t *testing.T) {
	comms := memComms(t, 2, nil)
	counts := []int{16, 15}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 2*8*counts[c.rank])
		return c.AlltoAll(buf, make([]byte, len(buf)), counts[c.rank], Int64)
	})
	require.ErrorIs(t, errs[0], ErrMismatch)
	require.ErrorContains(t, errs[0], "rank 0 called alltoall #1 (int64 x 16 per peer) but rank 1 called alltoall #1 (int64 x 15 per peer)")
	require.ErrorIs(t, errs[1], ErrMismatch)
}

func TestAlltoAllvInvalidArguments(t *testing.T) {
	c := memComms(t, 2, nil)[0]
	buf := make([]byte, 16)
	_, err := c.AlltoAllv(buf, []int{1}, []int{0, 1}, buf, []int{1, 1}, []int{0, 1}, Int32)
	require.ErrorContains(t, err, "sendcounts has 1 entries, need one per rank (2)")
	_, err = c.AlltoAllv(buf, []int{1, -1}, []int{0, 1}, buf, []int{1, 1}, []int{0, 1}, Int32)
	require.ErrorContains(t, err, "sendcounts[1] is negative")
	_, err = c.AlltoAllv(buf, []int{2, 1}, []int{0, 1}, buf, []int{1, 1}, []int{0, 1}, Int32)
	require.ErrorContains(t, err, "rank 0 sends itself 2 elements but expects 1")
	_, err = c.AlltoAllv(buf, []int{1, 4}, []int{0, 1}, buf, []int{1, 1}, []int{0, 1}, Int32)
	require.ErrorContains(t, err, "send buffer holds 16 bytes, need 4 elements at element offset 1 for rank 1")
	_, err = c.AlltoAll(buf, buf, 3, Int32)
	require.ErrorContains(t, err, "alltoall: send buffer holds 16 bytes, need 24")
}
