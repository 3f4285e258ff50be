package core

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func testSelector(n int, link linkCost, allow algoAllow) (*selector, *observer.ObservedLogs) {
	obs, logs := observer.New(zapcore.InfoLevel)
	m := model{n: n, link: link, oneHost: link == shmCost, chunkBytes: 512 << 10, scratch: 512 << 10, llThreshold: 64 << 10, reduceGBs: reduceGBs}
	return newSelector(m, allow, loggers{tune: zap.New(obs)}), logs
}

// Where the ranks of a host outnumber its cores, every step waits for a core: the model
// counts a step crowd times dearer and prefers fewer steps (halving over the ring) at
// larger sizes; where they do not, nothing changes.
func TestModelKnowsCores(t *testing.T) {
	choose := func(n, cores, local int, k Kind, bytes int) Algo {
		s, _ := testSelector(n, shmCost, algoAllow{})
		s.m.cores, s.m.local = cores, local
		a, err := s.choose(k, bytes)
		require.NoError(t, err)
		return a
	}
	for _, c := range []struct {
		n, cores, local int
		k               Kind
		bytes           int
		uncrowded       Algo
		crowded         Algo
	}{
		{256, 2, 256, KindAllReduce, 10 << 20, AlgoRing, AlgoHalving},
		{256, 2, 256, KindReduceScatter, 64 << 10, AlgoRing, AlgoHalving},
		{64, 2, 64, KindAllReduce, 4 << 20, AlgoRing, AlgoHalving},
		{8, 2, 8, KindAllReduce, 512 << 10, AlgoRing, AlgoHalving},
		{2, 2, 2, KindAllReduce, 64 << 20, AlgoRing, AlgoRing},
		{4, 2, 4, KindAllReduce, 64 << 20, AlgoRing, AlgoRing},
		{16, 64, 16, KindAllReduce, 1 << 20, AlgoRing, AlgoRing}, // as many cores as ranks: not crowded
	} {
		name := fmt.Sprintf("%s of %d bytes, %d ranks, %d on %d cores", c.k, c.bytes, c.n, c.local, c.cores)
		require.Equal(t, c.uncrowded, choose(c.n, 0, 0, c.k, c.bytes), name+", cores unknown")
		require.Equal(t, c.crowded, choose(c.n, c.cores, c.local, c.k, c.bytes), name)
	}
	m := model{cores: 2, local: 2, oneHost: true}
	require.Equal(t, 1.0, m.crowd())
	m.local = 256
	require.Equal(t, 128.0, m.crowd())

	// Across hosts the crowded prices are not used (16 simulated hosts x 16 ranks on 2
	// cores measured them choosing worse: see crowd).
	for _, c := range []struct {
		bytes int
		want  Algo
	}{{8, AlgoRecDoubling}, {1 << 20, AlgoHier}} {
		s, _ := testSelector(256, tcpCost, algoAllow{})
		s.m.hosts, s.m.maxLocal, s.m.equalHosts, s.m.cores, s.m.local = 16, 16, true, 2, 16
		a, err := s.choose(KindAllReduce, c.bytes)
		require.NoError(t, err)
		require.Equal(t, c.want, a, "all_reduce of %d bytes, 16 hosts x 16 ranks on 2 cores", c.bytes)
	}
}

// The model's choices where they are clear-cut: latency algorithms for small messages,
// the ring for large ones, the one-shot path only on one host.
func TestModelChoices(t *testing.T) {
	cases := []struct {
		n     int
		link  linkCost
		coll  Kind
		bytes int
		want  Algo
	}{
		{2, shmCost, KindAllReduce, 8, AlgoRecDoubling},
		{2, shmCost, KindAllReduce, 64 << 20, AlgoRing},
		{4, shmCost, KindAllReduce, 8, AlgoDirect},
		{4, shmCost, KindAllReduce, 64 << 20, AlgoRing},
		{8, shmCost, KindAllReduce, 8, AlgoDirect},
		{4, tcpCost, KindAllReduce, 8, AlgoRecDoubling},
		{4, tcpCost, KindAllReduce, 64 << 20, AlgoRing},
		{16, tcpCost, KindAllReduce, 1 << 20, AlgoRing},
		{8, shmCost, KindAllReduce, 1 << 20, AlgoRing},
		{16, shmCost, KindAllReduce, 16 << 20, AlgoRing},
		{16, shmCost, KindAllReduce, 64 << 10, AlgoHalving},
		{256, shmCost, KindAllReduce, 1 << 20, AlgoHalving},
		{256, shmCost, KindAllReduce, 8 << 20, AlgoHalving}, // docs/limitations.md: "up to about 9 MiB"
		{256, shmCost, KindAllReduce, 10 << 20, AlgoRing},
		{2, shmCost, KindBroadcast, 64 << 20, AlgoTree},
		{4, shmCost, KindBroadcast, 8, AlgoTree},
		{4, shmCost, KindBroadcast, 64 << 20, AlgoChain},
		{4, tcpCost, KindReduce, 8, AlgoTree},
		{4, tcpCost, KindReduce, 64 << 20, AlgoChain},
		{4, shmCost, KindAllGather, 8, AlgoDirect},
		{4, shmCost, KindAllGather, 64 << 20, AlgoRing},
		{4, tcpCost, KindAllGather, 8, AlgoRing},
		{4, shmCost, KindReduceScatter, 8, AlgoHalving},
		{4, shmCost, KindReduceScatter, 64 << 20, AlgoRing},
		{256, shmCost, KindReduceScatter, 4 << 10, AlgoHalving},
		{256, shmCost, KindReduceScatter, 64 << 10, AlgoRing},
		{4, shmCost, KindBarrier, 0, AlgoDissemination},
	}
	for _, c := range cases {
		s, _ := testSelector(c.n, c.link, algoAllow{})
		got, err := s.choose(c.coll, c.bytes)
		require.NoError(t, err)
		require.Equal(t, c.want, got, "%s of %d bytes over %d ranks (%s)", c.coll, c.bytes, c.n, c.link.name)
	}
}

// Estimates grow with the message size and the rank count, so the choice flips once
// from latency to bandwidth algorithms as messages grow, never back.
func TestModelIsMonotone(t *testing.T) {
	for _, link := range []linkCost{shmCost, tcpCost} {
		for n := 2; n <= 16; n++ {
			s, _ := testSelector(n, link, algoAllow{})
			for _, k := range tunedKinds {
				row := &collectives[k]
				coll := row.tuneName()
				for _, x := range row.algos {
					prev := -1.0
					for b := 1; b <= 1<<30; b *= 4 {
						e := row.estimate(&s.m, x.algo, b)
						if e.why != "" {
							continue
						}
						require.GreaterOrEqual(t, e.us, prev, "%s:%s n=%d %s b=%d", coll, x.algo, n, link.name, b)
						prev = e.us
					}
				}
				if len(row.algos) < 2 {
					continue
				}
				line := ""
				for _, l := range s.table() {
					if strings.HasPrefix(l, coll+":") {
						line = l
					}
				}
				require.NotEmpty(t, line, coll)
				// "allreduce: rd 0-32K, ring 64K-1G": each algorithm appears in one span.
				for _, x := range row.algos {
					require.LessOrEqual(t, strings.Count(line, " "+x.algo.String()+" "), 1, line)
				}
			}
		}
	}
}

// GONCCL_ALGO restricts the choice; a restriction no algorithm can meet is a clear
// error, and every first choice of an algorithm is logged at INFO with the estimates.
func TestSelectorForcedAndLogged(t *testing.T) {
	s, logs := testSelector(4, shmCost, algoAllow{KindAllReduce: {AlgoRing}})
	got, err := s.choose(KindAllReduce, 8)
	require.NoError(t, err)
	require.Equal(t, AlgoRing, got)
	_, err = s.choose(KindAllReduce, 16)
	require.NoError(t, err)
	require.Equal(t, 1, logs.Len(), "each collective:algorithm is logged once")
	msg := logs.All()[0].Message
	require.Contains(t, msg, "allreduce of 8 bytes over 4 ranks (shm): ring")
	require.Contains(t, msg, "ring")
	require.Contains(t, msg, "chosen")

	s, _ = testSelector(4, tcpCost, algoAllow{KindAllReduce: {AlgoDirect}})
	_, err = s.choose(KindAllReduce, 8)
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "one host")

	s, _ = testSelector(4, shmCost, algoAllow{KindAllReduce: {AlgoRecDoubling}})
	_, err = s.choose(KindAllReduce, 1<<20)
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "at most 524288 bytes")
}

// A forced algorithm runs and gives the right values end to end; ranks that force
// different algorithms get a mismatch naming them, not garbage.
func TestForcedAlgorithmsAndDisagreement(t *testing.T) {
	for _, n := range []int{3, 5} {
		comms := shmComms(t, n, 1<<16, func(c *config) { c.llThreshold = 4096 })
		for _, algo := range []Algo{AlgoRecDoubling, AlgoDirect, AlgoRing} {
			for _, op := range []RedOp{Sum, Prod, Max, Min} {
				for _, dt := range []DataType{Float32, Int64, Float16} {
					for _, c := range comms {
						c.cfg.algo[KindAllReduce] = []Algo{algo}
					}
					count := 300
					ins := make([][]byte, n)
					outs := make([][]byte, n)
					for r := range ins {
						ins[r] = inputs(dt, op, count, r, int64(op))
						outs[r] = make([]byte, len(ins[r]))
					}
					errs := onAll(t, comms, func(c *Comm) (*Request, error) {
						return c.AllReduce(ins[c.rank], outs[c.rank], count, dt, op)
					})
					want := reference(dt, op, ins, count)
					for r := range comms {
						name := fmt.Sprintf("n=%d %s %s %s rank %d", n, algo, dt, op, r)
						require.NoError(t, errs[r], name)
						require.Equal(t, want, outs[r], name)
					}
				}
			}
		}
	}
	comms := shmComms(t, 2, 1<<16, nil)
	comms[0].cfg.algo[KindAllReduce] = []Algo{AlgoRecDoubling}
	comms[1].cfg.algo[KindAllReduce] = []Algo{AlgoRing}
	bufs := [][]byte{make([]byte, 64), make([]byte, 64)}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(bufs[c.rank], bufs[c.rank], 16, Float32, Sum)
	})
	joined := fmt.Sprint(errs[0], errs[1])
	require.ErrorIs(t, errs[0], ErrMismatch, joined)
	require.Contains(t, joined, "algorithm")
}
