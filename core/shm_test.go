package core

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
)

// shmComms builds n communicators in this process joined by shared-memory links
// (real memfd segments handed over /proc/self/fd) with small rings, so that frames
// larger than the ring stream through it.
func shmComms(t testing.TB, n, ringSize int, tweak func(*config)) []*Comm {
	t.Helper()
	return commsOver(t, n, tweak, func(i, j int) (transport.Link, transport.Link) {
		ca, cb := net.Pipe()
		dl := time.Now().Add(10 * time.Second)
		var a *shm.Link
		var errA error
		done := make(chan struct{})
		go func() {
			defer close(done)
			a, errA = shm.Connect(ca, j, true, ringSize, dl)
		}()
		b, errB := shm.Connect(cb, i, false, ringSize, dl)
		<-done
		require.NoError(t, errA)
		require.NoError(t, errB)
		return a, b
	})
}

// segmentsMapped counts this process's mappings of shm segments and its open fds.
func segmentsMapped(t testing.TB) (maps, fds int) {
	m, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return strings.Count(string(m), "gonccl-shm"), len(ents)
}

// The collectives run over shared-memory links exactly as over TCP.
func TestCollectivesOverShm(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		for _, ring := range []int{4096, 1 << 16} {
			comms := shmComms(t, n, ring, func(c *config) { c.chunkBytes = 8192; c.llThreshold = 1024 })
			name := fmt.Sprintf("n=%d ring=%d", n, ring)
			for ci, count := range []int{0, 1, 7, 1000, 40000} {
				for _, dt := range []DataType{Int32, Float32, Float64, Bfloat16} {
					for _, algo := range []Algo{AlgoRing, AlgoRecDoubling, AlgoDirect, AlgoHalving, AlgoChain} {
						if algo == AlgoRecDoubling && count*dt.Size() > 8192 || algo == AlgoDirect && count*dt.Size() > 1024 {
							continue
						}
						for _, c := range comms {
							c.cfg.algo[KindAllReduce] = []Algo{algo}
						}
						ins := make([][]byte, n)
						outs := make([][]byte, n)
						for r := range ins {
							ins[r] = inputs(dt, Sum, count, r, int64(ci))
							outs[r] = make([]byte, len(ins[r]))
						}
						errs := onAll(t, comms, func(c *Comm) (*Request, error) {
							return c.AllReduce(ins[c.rank], outs[c.rank], count, dt, Sum)
						})
						want := reference(dt, Sum, ins, count)
						for r := range comms {
							require.NoError(t, errs[r], "%s all_reduce %s %s count=%d", name, algo, dt, count)
							require.Equal(t, want, outs[r], "%s all_reduce %s %s count=%d rank %d", name, algo, dt, count, r)
						}
					}
					for _, algo := range []Algo{AlgoRing, AlgoHalving} {
						for _, c := range comms {
							c.cfg.algo[KindReduceScatter] = []Algo{algo}
						}
						runReduceScatter(t, comms, count, dt, Sum, int64(ci), fmt.Sprintf("%s reduce_scatter %s %s count=%d", name, algo, dt, count))
					}
					runReduce(t, comms, count, dt, Max, ci%n, int64(ci), ci%2 == 0, fmt.Sprintf("%s reduce %s count=%d", name, dt, count))
				}
				// broadcast and all_gather move bytes only
				bufs := make([][]byte, n)
				src := inputs(Uint8, Sum, 4*count, 0, int64(ci))
				for r := range bufs {
					bufs[r] = make([]byte, len(src))
				}
				root := ci % n
				copy(bufs[root], src)
				errs := onAll(t, comms, func(c *Comm) (*Request, error) {
					return c.Broadcast(bufs[c.rank], bufs[c.rank], len(src), Uint8, root)
				})
				for r := range comms {
					require.NoError(t, errs[r])
					require.Equal(t, src, bufs[r], "%s broadcast count=%d rank %d", name, count, r)
				}
				for _, algo := range []Algo{AlgoRing, AlgoDirect} {
					if algo == AlgoDirect && count*4 > 1024 {
						continue
					}
					for _, c := range comms {
						c.cfg.algo[KindAllGather] = []Algo{algo}
					}
					gathered := make([][]byte, n)
					all := []byte{}
					for r := range gathered {
						gathered[r] = make([]byte, n*count*4)
						all = append(all, inputs(Int32, Sum, count, r, int64(ci))...)
					}
					errs = onAll(t, comms, func(c *Comm) (*Request, error) {
						return c.AllGather(inputs(Int32, Sum, count, c.rank, int64(ci)), gathered[c.rank], count, Int32)
					})
					for r := range comms {
						require.NoError(t, errs[r])
						require.Equal(t, all, gathered[r], "%s all_gather %s count=%d rank %d", name, algo, count, r)
					}
				}
			}
			errs := onAll(t, comms, func(c *Comm) (*Request, error) { return c.Barrier() })
			for r := range comms {
				require.NoError(t, errs[r])
			}
		}
	}
}

func TestMismatchOverShm(t *testing.T) {
	comms := shmComms(t, 2, 4096, nil)
	counts := []int{1024, 2048}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 4*counts[c.rank])
		return c.AllReduce(buf, buf, counts[c.rank], Float32, Sum)
	})
	require.ErrorIs(t, errs[0], ErrMismatch)
	require.ErrorContains(t, errs[0], "rank 0 called all_reduce #1 (float32 x 1024, sum) but rank 1 called all_reduce #1 (float32 x 2048, sum)")
	require.ErrorIs(t, errs[1], ErrMismatch)
}

func TestTimeoutOverShm(t *testing.T) {
	comms := shmComms(t, 2, 4096, nil)
	comms[0].timeout = 200 * time.Millisecond
	buf := make([]byte, 4)
	req, err := comms[0].AllReduce(buf, buf, 1, Float32, Sum)
	require.NoError(t, err)
	_, err = req.Wait(-1)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "waiting for rank 1")
}

// captureStderr runs f with os.Stderr (where the loggers write) sent to a file, and
// returns what was written.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	tmp, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer tmp.Close()
	saved := os.Stderr
	os.Stderr = tmp
	defer func() { os.Stderr = saved }()
	f()
	b, err := os.ReadFile(tmp.Name())
	require.NoError(t, err)
	return string(b)
}

// Ranks on one host use shm under NewComm (and say so at INIT), unless
// GONCCL_SHM_DISABLE=1; either way results are right and Destroy frees every segment
// and fd.
func TestNewCommPicksShmOnOneHost(t *testing.T) {
	for _, disable := range []string{"0", "1"} {
		t.Setenv("GONCCL_DEBUG", "INFO")
		t.Setenv("GONCCL_DEBUG_SUBSYS", "INIT")
		t.Setenv("GONCCL_SHM_DISABLE", disable)
		maps0, fds0 := segmentsMapped(t)
		n := 3
		var comms []*Comm
		logs := captureStderr(t, func() { comms = initAll(t, n) })
		kind := map[string]string{"0": "shm", "1": "tcp"}[disable]
		for r, c := range comms {
			for p, l := range linksOf(c) {
				if p != r {
					require.Equal(t, kind, transportName(l), "GONCCL_SHM_DISABLE=%s rank %d peer %d", disable, r, p)
				}
			}
			want := fmt.Sprintf("%d:%s(", (r+1)%n, kind)
			require.Contains(t, logs, want, "INIT log with GONCCL_SHM_DISABLE=%s", disable)
		}
		if disable == "0" {
			maps, _ := segmentsMapped(t)
			require.Equal(t, maps0+n*(n-1), maps, "each rank maps one segment per local peer")
		}
		count := 300001 // > the ring: frames stream through it
		errs, outs, want := allReduceFloat32(t, comms, count, 3)
		for r, c := range comms {
			require.NoError(t, errs[r])
			require.Equal(t, want, outs[r])
			require.NoError(t, c.Destroy())
		}
		require.Eventually(t, func() bool {
			maps, fds := segmentsMapped(t)
			return maps == maps0 && fds <= fds0
		}, 5*time.Second, 20*time.Millisecond, "segments or fds leaked after Destroy (GONCCL_SHM_DISABLE=%s)", disable)
	}
}

func TestShmDisableMustBeZeroOrOne(t *testing.T) {
	t.Setenv("GONCCL_SHM_DISABLE", "yes")
	_, err := loadConfig()
	require.ErrorContains(t, err, "GONCCL_SHM_DISABLE")
}
