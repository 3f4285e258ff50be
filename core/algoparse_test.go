package core

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAlgoNCCLSyntax(t *testing.T) {
	cases := []struct {
		in   string
		want algoAllow
	}{
		{"", algoAllow{}},
		{"allreduce:ring", algoAllow{KindAllReduce: {AlgoRing}}},
		{"ALLREDUCE:Ring", algoAllow{KindAllReduce: {AlgoRing}}},
		{"allreduce:ring,rd;broadcast:chain", algoAllow{KindAllReduce: {AlgoRecDoubling, AlgoRing}, KindBroadcast: {AlgoChain}}},
		{"allreduce:ring,broadcast:chain", algoAllow{KindAllReduce: {AlgoRing}, KindBroadcast: {AlgoChain}}},
		{"allreduce:^direct", algoAllow{KindAllReduce: {AlgoRecDoubling, AlgoRing, AlgoHalving, AlgoChain, AlgoHier}}},
		{"^direct", algoAllow{KindAllReduce: {AlgoRecDoubling, AlgoRing, AlgoHalving, AlgoChain, AlgoHier}, KindAllGather: {AlgoRing}}},
		{"ring", algoAllow{KindAllReduce: {AlgoRing}, KindAllGather: {AlgoRing}, KindReduceScatter: {AlgoRing}}},
		{"tree;allreduce:rd", algoAllow{KindBroadcast: {AlgoTree}, KindReduce: {AlgoTree}, KindAllReduce: {AlgoRecDoubling}}},
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
	for _, bad := range []string{"allreduce:magic", "magic", "allgather:rd", "warp:ring", "allreduce:ring,^rd", "reducescatter:^ring,^halving", "barrier:^dissemination"} {
		_, err := parseAlgo(bad)
		require.ErrorIs(t, err, ErrInvalidArgument, bad)
		require.ErrorContains(t, err, "GONCCL_ALGO", bad)
		require.ErrorContains(t, err, "allreduce:rd|direct|ring", bad) // the error lists the choices
	}
}
