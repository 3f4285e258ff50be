package core

import (
	"fmt"
	"strings"
)

// The table of collectives: one row per operation kind with its names, whether it
// reduces, the algorithms the cost model chooses among (each with its estimate, in
// tuning.go) and the function that runs it (dispatch.go). Dispatch, the cost model,
// GONCCL_ALGO, the TUNING and INIT logs, errors and the flight recorder all read it;
// a new collective is a row here, a new algorithm an entry in its row.

// Kind is an operation kind; it travels in every frame header.
type Kind uint8

// Operation kinds. The values are on the wire: never renumber them.
const (
	KindAllReduce Kind = 1
	KindBroadcast Kind = 2
	KindAllGather Kind = 3
	KindBarrier   Kind = 4

	KindReduce        Kind = 5
	KindReduceScatter Kind = 6
	KindGather        Kind = 7
	KindScatter       Kind = 8
	KindAlltoAll      Kind = 9
	KindAlltoAllv     Kind = 10
)

// Algo is an algorithm; it travels in every frame header so that ranks that chose
// different algorithms (different GONCCL_ALGO settings) get a clear error.
type Algo uint8

// Algorithms. The values are on the wire: never renumber them.
const (
	AlgoNone          Algo = 0
	AlgoRing          Algo = 1 // all_reduce, all_gather, reduce_scatter: ring, pipelined in chunks
	AlgoRecDoubling   Algo = 2 // all_reduce: recursive doubling, for small messages
	AlgoTree          Algo = 3 // broadcast, reduce: binomial tree, for small messages
	AlgoChain         Algo = 4 // broadcast, reduce: pipelined chain in ring order from/to the root; all_reduce: both, rooted at rank 0
	AlgoDissemination Algo = 5 // barrier
	AlgoDirect        Algo = 6 // gather, scatter: every rank to or from the root directly
	AlgoPairwise      Algo = 7 // alltoall(v): step s sends to rank r+s, receives from r-s
	AlgoHier          Algo = 8 // all_reduce across hosts: reduce in each host, ring of host leaders, broadcast in each host
	// AlgoZeroCopy: all_reduce, all_gather, reduce_scatter, broadcast on buffers every
	// rank of one host allocated in gonccl's shared memory, read and written where they
	// lie (zerocopy.go). Not the cost model's choice: the buffers decide it.
	AlgoZeroCopy Algo = 9
	// AlgoHalving: all_reduce by recursive halving then doubling (Rabenseifner): the
	// ring's bytes in 2 log2(n) steps instead of 2(n-1), for many ranks; reduce_scatter
	// by recursive halving alone, log2(n) steps instead of n-1.
	AlgoHalving Algo = 10
)

// algoNames spells every algorithm, the same in GONCCL_ALGO, logs, errors and the
// flight recorder.
var algoNames = [...]string{
	AlgoNone:          "none",
	AlgoRing:          "ring",
	AlgoRecDoubling:   "rd",
	AlgoTree:          "tree",
	AlgoChain:         "chain",
	AlgoDissemination: "dissemination",
	AlgoDirect:        "direct",
	AlgoPairwise:      "pairwise",
	AlgoHier:          "hier",
	AlgoZeroCopy:      "zerocopy",
	AlgoHalving:       "halving",
}

func (a Algo) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return algoNames[AlgoNone]
}

// collective is one row of the table.
type collective struct {
	// name is NCCL's spelling ("AllReduce"). Lower-cased ("allreduce", see tuneName) it
	// names the collective in GONCCL_ALGO and the TUNING log.
	name string
	// label names an operation of this kind in errors, logs and the flight recorder:
	// torch's spelling ("all_reduce"), which users, tests and python/gonccl/trace.py read.
	label string
	// reduces: the operation takes a reduction (RedOp).
	reduces bool
	// algos are the algorithms the cost model chooses among, preferred first when
	// estimates tie. Empty for a kind whose run function chooses as another kind's
	// (alltoallv as alltoall): GONCCL_ALGO does not name it.
	algos []algorithm
	// run runs one operation on the executor: it picks the algorithm (Comm.pick) and
	// runs it.
	run func(c *Comm, e *exec, o *op) error
}

// algorithm is one algorithm of a collective and its cost estimate for a message of
// bytes (the per-rank buffer; for all_gather and reduce_scatter the per-rank block): its
// modelled time in microseconds, or why it cannot run the message.
type algorithm struct {
	algo Algo
	cost func(m *model, bytes int) (us float64, why string)
}

// collectives is the table, indexed by Kind.
var collectives = [...]collective{
	KindAllReduce: {name: "AllReduce", label: "all_reduce", reduces: true, run: (*Comm).runAllReduce,
		algos: []algorithm{
			{AlgoRecDoubling, (*model).allReduceRDCost},
			{AlgoDirect, (*model).allReduceDirectCost},
			{AlgoRing, (*model).allReduceRingCost},
			{AlgoHalving, (*model).allReduceHalvingCost},
			{AlgoChain, (*model).allReduceChainCost},
			{AlgoHier, (*model).allReduceHierCost},
		}},
	KindBroadcast: {name: "Broadcast", label: "broadcast", run: (*Comm).runBroadcast,
		algos: []algorithm{{AlgoTree, (*model).broadcastTreeCost}, {AlgoChain, (*model).broadcastChainCost}}},
	KindReduce: {name: "Reduce", label: "reduce", reduces: true, run: (*Comm).runReduce,
		algos: []algorithm{{AlgoTree, (*model).reduceTreeCost}, {AlgoChain, (*model).reduceChainCost}}},
	KindAllGather: {name: "AllGather", label: "all_gather", run: (*Comm).runAllGather,
		algos: []algorithm{{AlgoDirect, (*model).allGatherDirectCost}, {AlgoRing, (*model).allGatherRingCost}}},
	KindReduceScatter: {name: "ReduceScatter", label: "reduce_scatter", reduces: true, run: (*Comm).runReduceScatter,
		algos: []algorithm{{AlgoRing, (*model).reduceScatterRingCost}, {AlgoHalving, (*model).reduceScatterHalvingCost}}},
	KindGather: {name: "Gather", label: "gather", run: (*Comm).runGather,
		algos: []algorithm{{AlgoDirect, (*model).perPeerCost}}},
	KindScatter: {name: "Scatter", label: "scatter", run: (*Comm).runScatter,
		algos: []algorithm{{AlgoDirect, (*model).perPeerCost}}},
	KindAlltoAll: {name: "AlltoAll", label: "alltoall", run: (*Comm).runAlltoAll,
		algos: []algorithm{{AlgoPairwise, (*model).perPeerCost}}},
	KindAlltoAllv: {name: "AlltoAllv", label: "alltoallv", run: (*Comm).runAlltoAllv},
	KindBarrier: {name: "Barrier", label: "barrier", run: (*Comm).runBarrier,
		algos: []algorithm{{AlgoDissemination, (*model).barrierCost}}},
}

// tunedKinds are the kinds GONCCL_ALGO names, in the order its help, its errors and
// the INIT log's table of choices list them.
var tunedKinds = [...]Kind{KindAllReduce, KindBroadcast, KindReduce, KindAllGather, KindReduceScatter,
	KindGather, KindScatter, KindAlltoAll, KindBarrier}

// row returns k's row, nil for a kind the table does not have.
func (k Kind) row() *collective {
	if int(k) < len(collectives) && collectives[k].name != "" {
		return &collectives[k]
	}
	return nil
}

func (k Kind) String() string {
	switch k {
	case KindSend:
		return "send"
	case KindRecv:
		return "recv"
	}
	if r := k.row(); r != nil {
		return r.label
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// reduces reports whether an operation of kind k takes a reduction.
func (k Kind) reduces() bool {
	r := k.row()
	return r != nil && r.reduces
}

// tuneName is r's name in GONCCL_ALGO and the TUNING log: NCCL's, lower-cased.
func (r *collective) tuneName() string { return strings.ToLower(r.name) }

// tunedKind returns the kind GONCCL_ALGO calls name.
func tunedKind(name string) (Kind, bool) {
	for _, k := range tunedKinds {
		if collectives[k].tuneName() == name {
			return k, true
		}
	}
	return 0, false
}

// algoList returns r's algorithms in order.
func (r *collective) algoList() []Algo {
	list := make([]Algo, len(r.algos))
	for i, x := range r.algos {
		list[i] = x.algo
	}
	return list
}
