package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// simulateHosts makes comms (over in-memory links) believe their ranks sit on the
// given hosts, and re-runs their cost model with the allowed all_reduce algorithms.
func simulateHosts(comms []*Comm, hosts [][]int, allreduce ...Algo) {
	for _, c := range comms {
		c.hosts = hosts
		algo := algoAllow{}
		if len(allreduce) > 0 {
			algo[KindAllReduce] = allreduce
		}
		c.sel = newSelector(c.costModel(), algo, c.logs)
	}
}

// The hierarchical all_reduce gives the reference result for 1-3 simulated hosts of
// 1-3 ranks each, hosts of uneven size and hosts whose ranks interleave, for several
// reductions and sizes (one element to many chunks).
func TestAllReduceHierMatchesReference(t *testing.T) {
	layouts := [][][]int{
		{{0, 1}, {2, 3}},
		{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}},
		{{0}, {1, 2, 3}},
		{{0, 1, 2}, {3}, {4, 5}},
		{{0, 2}, {1, 3}},      // interleaved: host A holds ranks 0 and 2
		{{0, 1}, {2, 3}, {4}}, // a host of one
		{{0, 1, 2}},           // one host: hier degenerates to chain reduce + broadcast
	}
	for _, hosts := range layouts {
		n := 0
		for _, h := range hosts {
			n += len(h)
		}
		t.Run(fmt.Sprint(hosts), func(t *testing.T) {
			comms := memComms(t, n, nil)
			simulateHosts(comms, hosts, AlgoHier)
			if len(hosts) < 2 {
				// The model refuses a single host; force it through the executor anyway.
				for _, c := range comms {
					c.sel.m.hosts = 2
				}
			}
			for _, tc := range []struct {
				dt    DataType
				op    RedOp
				count int
			}{{Float32, Sum, 1}, {Float32, Avg, 1001}, {Int64, Max, 7}, {Float64, Sum, 4096*3 + 5}, {Int32, Prod, 33}} {
				ins, outs := make([][]byte, n), make([][]byte, n)
				for r := range ins {
					ins[r] = inputs(tc.dt, tc.op, tc.count, r, int64(tc.count))
					outs[r] = make([]byte, len(ins[r]))
				}
				for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
					return c.AllReduce(ins[c.rank], outs[c.rank], tc.count, tc.dt, tc.op)
				}) {
					require.NoError(t, err, "rank %d, %s %s x %d", r, tc.op, tc.dt, tc.count)
				}
				want := reference(tc.dt, tc.op, ins, tc.count)
				for r := range outs {
					require.Equal(t, want, outs[r], "rank %d, %s %s x %d", r, tc.op, tc.dt, tc.count)
				}
			}
		})
	}
}

// The cost model picks the hierarchical all_reduce for large messages when ranks span
// hosts with several ranks on a host, and never on one host or with one rank per host.
func TestCostModelChoosesHierAcrossHosts(t *testing.T) {
	comms := memComms(t, 4, nil)
	simulateHosts(comms[:1], [][]int{{0, 1}, {2, 3}})
	algo, err := comms[0].sel.choose(KindAllReduce, 64<<20)
	require.NoError(t, err)
	require.Equal(t, AlgoHier, algo, "2 hosts x 2 ranks, 64 MiB")
	simulateHosts(comms[:1], [][]int{{0}, {1}, {2}, {3}})
	algo, err = comms[0].sel.choose(KindAllReduce, 64<<20)
	require.NoError(t, err)
	require.NotEqual(t, AlgoHier, algo, "one rank per host")
	simulateHosts(comms[:1], nil)
	algo, err = comms[0].sel.choose(KindAllReduce, 64<<20)
	require.NoError(t, err)
	require.NotEqual(t, AlgoHier, algo, "unknown hosts")
}
