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

func TestParseAlgoNCCLSyntax(t *testing.T) {
	cases := []struct {
		in   string
		want map[string][]string
	}{
		{"", map[string][]string{}},
		{"allreduce:ring", map[string][]string{"allreduce": {"ring"}}},
		{"ALLREDUCE:Ring", map[string][]string{"allreduce": {"ring"}}},
		{"allreduce:ring,rd;broadcast:chain", map[string][]string{"allreduce": {"rd", "ring"}, "broadcast": {"chain"}}},
		{"allreduce:ring,broadcast:chain", map[string][]string{"allreduce": {"ring"}, "broadcast": {"chain"}}},
		{"allreduce:^direct", map[string][]string{"allreduce": {"rd", "ring", "hier"}}},
		{"^direct", map[string][]string{"allreduce": {"rd", "ring", "hier"}, "allgather": {"ring"}}},
		{"ring", map[string][]string{"allreduce": {"ring"}, "allgather": {"ring"}}}, // reducescatter has only the ring anyway
		{"tree;allreduce:rd", map[string][]string{"broadcast": {"tree"}, "reduce": {"tree"}, "allreduce": {"rd"}}},
		{" allgather : direct ", nil}, // spaces inside an entry are not NCCL's syntax either
	}
	for _, c := range cases {
		got, err := parseAlgo(c.in)
		if c.want == nil {
			require.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		require.Equal(t, c.want, got, c.in)
	}
	for _, bad := range []string{"allreduce:magic", "magic", "allgather:rd", "warp:ring", "allreduce:ring,^rd", "reducescatter:^ring", "barrier:^dissemination"} {
		_, err := parseAlgo(bad)
		require.ErrorIs(t, err, ErrInvalidArgument, bad)
		require.ErrorContains(t, err, "GONCCL_ALGO", bad)
		require.ErrorContains(t, err, "allreduce:rd|direct|ring", bad) // the error lists the choices
	}
}

func testSelector(n int, link linkCost, allow map[string][]string) (*selector, *observer.ObservedLogs) {
	obs, logs := observer.New(zapcore.InfoLevel)
	m := model{n: n, link: link, oneHost: link == shmCost, chunkBytes: 512 << 10, scratch: 512 << 10, llThreshold: 64 << 10}
	return newSelector(m, allow, loggers{tune: zap.New(obs)}), logs
}

// The model's choices where they are clear-cut: latency algorithms for small messages,
// the ring for large ones, the one-shot path only on one host.
func TestModelChoices(t *testing.T) {
	cases := []struct {
		n     int
		link  linkCost
		coll  string
		bytes int
		want  string
	}{
		{2, shmCost, "allreduce", 8, "rd"},
		{2, shmCost, "allreduce", 64 << 20, "ring"},
		{4, shmCost, "allreduce", 8, "direct"},
		{4, shmCost, "allreduce", 64 << 20, "ring"},
		{8, shmCost, "allreduce", 8, "direct"},
		{4, tcpCost, "allreduce", 8, "rd"},
		{4, tcpCost, "allreduce", 64 << 20, "ring"},
		{16, tcpCost, "allreduce", 1 << 20, "ring"},
		{2, shmCost, "broadcast", 64 << 20, "tree"},
		{4, shmCost, "broadcast", 8, "tree"},
		{4, shmCost, "broadcast", 64 << 20, "chain"},
		{4, tcpCost, "reduce", 8, "tree"},
		{4, tcpCost, "reduce", 64 << 20, "chain"},
		{4, shmCost, "allgather", 8, "direct"},
		{4, shmCost, "allgather", 64 << 20, "ring"},
		{4, tcpCost, "allgather", 8, "ring"},
		{4, shmCost, "reducescatter", 8, "ring"},
		{4, shmCost, "barrier", 0, "dissemination"},
	}
	for _, c := range cases {
		s, _ := testSelector(c.n, c.link, map[string][]string{})
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
			s, _ := testSelector(n, link, map[string][]string{})
			for _, coll := range collectiveNames {
				for _, algo := range algorithms[coll] {
					prev := -1.0
					for b := 1; b <= 1<<30; b *= 4 {
						e := s.m.estimate(coll, algo, b)
						if e.why != "" {
							continue
						}
						require.GreaterOrEqual(t, e.us, prev, "%s:%s n=%d %s b=%d", coll, algo, n, link.name, b)
						prev = e.us
					}
				}
				if len(algorithms[coll]) < 2 {
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
				for _, algo := range algorithms[coll] {
					require.LessOrEqual(t, strings.Count(line, " "+algo+" "), 1, line)
				}
			}
		}
	}
}

// GONCCL_ALGO restricts the choice; a restriction no algorithm can meet is a clear
// error, and every first choice of an algorithm is logged at INFO with the estimates.
func TestSelectorForcedAndLogged(t *testing.T) {
	s, logs := testSelector(4, shmCost, map[string][]string{"allreduce": {"ring"}})
	got, err := s.choose("allreduce", 8)
	require.NoError(t, err)
	require.Equal(t, "ring", got)
	_, err = s.choose("allreduce", 16)
	require.NoError(t, err)
	require.Equal(t, 1, logs.Len(), "each collective:algorithm is logged once")
	msg := logs.All()[0].Message
	require.Contains(t, msg, "allreduce of 8 bytes over 4 ranks (shm): ring")
	require.Contains(t, msg, "ring")
	require.Contains(t, msg, "chosen")

	s, _ = testSelector(4, tcpCost, map[string][]string{"allreduce": {"direct"}})
	_, err = s.choose("allreduce", 8)
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "one host")

	s, _ = testSelector(4, shmCost, map[string][]string{"allreduce": {"rd"}})
	_, err = s.choose("allreduce", 1<<20)
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "at most 524288 bytes")
}

// A forced algorithm runs and gives the right values end to end; ranks that force
// different algorithms get a mismatch naming them, not garbage.
func TestForcedAlgorithmsAndDisagreement(t *testing.T) {
	for _, n := range []int{3, 5} {
		comms := shmComms(t, n, 1<<16, func(c *config) { c.llThreshold = 4096 })
		for _, algo := range []string{"rd", "direct", "ring"} {
			for _, op := range []RedOp{Sum, Prod, Max, Min} {
				for _, dt := range []DataType{Float32, Int64, Float16} {
					for _, c := range comms {
						c.cfg.algo["allreduce"] = []string{algo}
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
	comms[0].cfg.algo["allreduce"] = []string{"rd"}
	comms[1].cfg.algo["allreduce"] = []string{"ring"}
	bufs := [][]byte{make([]byte, 64), make([]byte, 64)}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(bufs[c.rank], bufs[c.rank], 16, Float32, Sum)
	})
	joined := fmt.Sprint(errs[0], errs[1])
	require.ErrorIs(t, errs[0], ErrMismatch, joined)
	require.Contains(t, joined, "algorithm")
}
