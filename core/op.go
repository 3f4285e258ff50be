package core

import (
	"fmt"

	"github.com/gonccl/gonccl/transport"
)

// Kind is an operation kind; it travels in every frame header.
type Kind uint8

// Operation kinds.
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

func (k Kind) String() string {
	switch k {
	case KindAllReduce:
		return "all_reduce"
	case KindBroadcast:
		return "broadcast"
	case KindAllGather:
		return "all_gather"
	case KindBarrier:
		return "barrier"
	case KindReduce:
		return "reduce"
	case KindReduceScatter:
		return "reduce_scatter"
	case KindGather:
		return "gather"
	case KindScatter:
		return "scatter"
	case KindAlltoAll:
		return "alltoall"
	case KindAlltoAllv:
		return "alltoallv"
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Algo is an algorithm; it travels in every frame header so that ranks that chose
// different algorithms (different GONCCL_ALGO settings) get a clear error.
type Algo uint8

// Algorithms.
const (
	AlgoNone          Algo = 0
	AlgoRing          Algo = 1 // all_reduce, all_gather, reduce_scatter: ring, pipelined in chunks
	AlgoRecDoubling   Algo = 2 // all_reduce: recursive doubling, for small messages
	AlgoTree          Algo = 3 // broadcast, reduce: binomial tree, for small messages
	AlgoChain         Algo = 4 // broadcast, reduce: pipelined chain in ring order from/to the root
	AlgoDissemination Algo = 5 // barrier
	AlgoDirect        Algo = 6 // gather, scatter: every rank to or from the root directly
	AlgoPairwise      Algo = 7 // alltoall(v): step s sends to rank r+s, receives from r-s
	AlgoHier          Algo = 8 // all_reduce across hosts: reduce in each host, ring of host leaders, broadcast in each host
)

func (a Algo) String() string {
	switch a {
	case AlgoRing:
		return "ring"
	case AlgoRecDoubling:
		return "rd"
	case AlgoTree:
		return "tree"
	case AlgoChain:
		return "chain"
	case AlgoDissemination:
		return "dissemination"
	case AlgoDirect:
		return "direct"
	case AlgoPairwise:
		return "pairwise"
	case AlgoHier:
		return "hier"
	}
	return "none"
}

// op is one enqueued operation.
type op struct {
	kind  Kind
	seq   uint64
	send  []byte // caller's send buffer (may alias recv)
	recv  []byte // caller's receive buffer
	count int    // elements: the whole op's, or per rank (all_gather, gather, scatter, reduce_scatter) or per peer (alltoall)
	vargs *vArgs // alltoallv: per-peer counts and displacements
	dtype DataType
	redop RedOp
	root  int
	req   *Request
	hooks Hooks // optional: see WithHooks
	algo  Algo  // the algorithm it ran with, once run
}

// describe renders an operation as a user would have called it.
func describe(kind Kind, seq uint64, dt DataType, count uint64, redop RedOp, root int) string {
	switch kind {
	case KindAllReduce:
		return fmt.Sprintf("%s #%d (%s x %d, %s)", kind, seq, dt, count, redop)
	case KindBroadcast:
		return fmt.Sprintf("%s #%d (%s x %d, root %d)", kind, seq, dt, count, root)
	case KindAllGather:
		return fmt.Sprintf("%s #%d (%s x %d per rank)", kind, seq, dt, count)
	case KindReduce:
		return fmt.Sprintf("%s #%d (%s x %d, %s, root %d)", kind, seq, dt, count, redop, root)
	case KindReduceScatter:
		return fmt.Sprintf("%s #%d (%s x %d per rank, %s)", kind, seq, dt, count, redop)
	case KindGather, KindScatter:
		return fmt.Sprintf("%s #%d (%s x %d, root %d)", kind, seq, dt, count, root)
	case KindAlltoAll:
		return fmt.Sprintf("%s #%d (%s x %d per peer)", kind, seq, dt, count)
	case KindAlltoAllv:
		// Counts differ per peer; frames carry the count of their own pair.
		return fmt.Sprintf("%s #%d (%s)", kind, seq, dt)
	}
	return fmt.Sprintf("%s #%d", kind, seq)
}

func (o *op) String() string {
	return describe(o.kind, o.seq, o.dtype, uint64(o.count), o.redop, o.root)
}

func describeHeader(h transport.Header) string {
	return describe(Kind(h.Kind), h.Seq, DataType(h.DType), h.Count, RedOp(h.Op), int(h.Root))
}

// mismatchText explains a mismatched frame from the point of view of both ranks.
func mismatchText(me int, m *transport.MismatchError) string {
	mine, theirs := describeHeader(m.Want), describeHeader(m.Got)
	if mine == theirs {
		mine += fmt.Sprintf(" [algorithm %s, offset %d, %d bytes]", Algo(m.Want.Algo), m.Want.Offset, m.Want.Len)
		theirs += fmt.Sprintf(" [algorithm %s, offset %d, %d bytes]", Algo(m.Got.Algo), m.Got.Offset, m.Got.Len)
	}
	return fmt.Sprintf("rank %d called %s but rank %d called %s", me, mine, m.Peer, theirs)
}
