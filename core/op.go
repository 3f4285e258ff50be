package core

import (
	"fmt"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// op is one enqueued operation.
type op struct {
	kind   Kind
	seq    uint64
	send   []byte // caller's send buffer (may alias recv)
	recv   []byte // caller's receive buffer
	count  int    // elements: the whole op's, or per rank (all_gather, gather, scatter, reduce_scatter) or per peer (alltoall)
	vargs  *vArgs // alltoallv: per-peer counts and displacements
	dtype  DataType
	redop  RedOp
	root   int
	req    *Request
	hooks  Hooks  // optional: see WithHooks
	wire   uint64 // the count its frames carry, if not count: see WithWireCount
	waited bool   // see WaitedAtOnce
	algo   Algo   // the algorithm it ran with, once run
	stamp  int64  // hop timing: the end of its last hop so far (see hops.go)
	// timeout is the communicator's when the operation was enqueued: its deadline is
	// that long after the executor starts it.
	timeout time.Duration
	group   *TraceGroup // the caller's collective it is part of (WithTraceGroup), nil if none
	part    int         // its number in group, from 1
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
	s := describe(o.kind, o.seq, o.dtype, uint64(o.count), o.redop, o.root)
	if o.group != nil {
		s = fmt.Sprintf("%s, part %d of %s", s, o.part, o.group)
	}
	return s
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
	text := fmt.Sprintf("rank %d called %s but rank %d called %s", me, mine, m.Peer, theirs)
	if next := mismatchNextStep(m.Want, m.Got); next != "" {
		text += " (" + next + ")"
	}
	return text
}

// mismatchNextStep says what to do about two ranks' calls that differ, by what differs
// first: the collective, the dtype, the size, the reduction or the root.
func mismatchNextStep(want, got transport.Header) string {
	const trace = "; GONCCL_TRACE_DUMP_DIR and python -m gonccl.trace list each rank's calls"
	switch {
	case want.Kind != got.Kind || want.Seq != got.Seq:
		return "the ranks' calls went out of step: every rank must make the same collective calls in the same order, so look for a call that only some ranks make" + trace
	case want.DType != got.DType:
		return "every rank must pass tensors of the same dtype: convert one side (tensor.to(dtype)) before the call"
	case want.Count != got.Count:
		return "every rank must pass tensors of the same number of elements (per rank, for all_gather and reduce_scatter): check the shapes each rank builds"
	case want.Op != got.Op:
		return "every rank must pass the same reduction op"
	case want.Root != got.Root:
		return "every rank must name the same root (src or dst)"
	}
	return ""
}

// wireCount is the count the operation's frames carry.
func (o *op) wireCount() uint64 {
	if o.wire != 0 {
		return o.wire
	}
	return uint64(o.count)
}
