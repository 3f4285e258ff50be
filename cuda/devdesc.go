package cuda

import (
	"fmt"
	"strings"

	"github.com/gonccl/gonccl/internal/reduce"
)

// Every device collective's first round checks that the ranks agree on it, on the
// GPU, before any rank reads another's data: each rank's stream writes a descriptor of
// the operation (kind, dtype, reduction, root, count) into its slot of every rank's
// header before its first ready flag, and each rank's stream, once a peer's ready flag
// says the peer is in this round, waits until the peer's descriptor equals its own.
//
// A stream can only wait for a 32-bit word to be "greater or equal" (wrap-around) to a
// value: x == d is waited for as x >= d and -x >= -d, two waits on two words the peer
// writes (x and -x). Both are exact. The descriptor fits two 30-bit fields (shape and
// count), so the check is four waits per peer, on words in the rank's own header. Each
// field stays below 2^30, so one value (2^30-1 for x, 0 for -x) satisfies every wait
// at once: that is how a rank releases its own streams (Release) when it gives up.
//
// Ranks that disagree thus wait for ever, on the GPU; the host watcher (devfault.go)
// sees an operation pending too long, reads its own header and names the ranks and the
// field that differ. Every rank that differs from any other waits (each compares with
// every peer), so each reports the mismatch itself. Rounds after the first do not
// check: every rank reached them through an agreeing first round.

// opKind is a device collective, as the descriptor names it.
type opKind uint8

const (
	kindAllGather opKind = 1 + iota
	kindBroadcast
	kindAllReduce
	kindReduce
	kindReduceScatter
	kindAlltoAll
	kindGather
	kindScatter
	kindAllReduceRing     // all_reduce by the ring (devring.go): ranks that chose differently disagree
	kindReduceScatterRing // reduce_scatter by the ring
)

var kindNames = [16]string{"?", "all_gather", "broadcast", "all_reduce", "reduce", "reduce_scatter", "alltoall", "gather", "scatter",
	"all_reduce (ring)", "reduce_scatter (ring)"}

func (k opKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Limits of what a descriptor holds.
const (
	maxRanks    = 1023    // roots (and ranks) below this
	maxDevCount = 1 << 37 // elements (or bytes) of one operation
	fieldMask   = 1<<30 - 1
)

// opDesc describes one device collective as every rank must call it.
type opDesc struct {
	kind  opKind
	dt    reduce.DataType
	bytes bool // count is in bytes: a copy that does not look at the dtype
	op    reduce.RedOp
	hasOp bool
	root  int // -1: none
	count int
}

// byteDesc describes a collective that moves bytes.
func byteDesc(k opKind, bytes, root int) opDesc {
	return opDesc{kind: k, bytes: true, root: root, count: bytes}
}

// reduceDesc describes a reducing collective.
func reduceDesc(k opKind, count int, dt reduce.DataType, op reduce.RedOp, root int) opDesc {
	return opDesc{kind: k, dt: dt, op: op, hasOp: true, root: root, count: count}
}

func (d opDesc) String() string {
	var b strings.Builder
	b.WriteString(d.kind.String())
	if d.bytes {
		fmt.Fprintf(&b, " of %d bytes", d.count)
	} else {
		fmt.Fprintf(&b, " of %d x %s", d.count, d.dt)
	}
	if d.hasOp {
		fmt.Fprintf(&b, ", %s", d.op)
	}
	if d.root >= 0 {
		fmt.Fprintf(&b, ", root %d", d.root)
	}
	return b.String()
}

// check refuses what the descriptor cannot hold.
func (d opDesc) check() error {
	if d.count < 0 || d.count >= maxDevCount {
		return fmt.Errorf("cuda: %v: the device path takes at most 2^37 elements (or bytes) per operation", d)
	}
	if d.root >= maxRanks {
		return fmt.Errorf("cuda: %v: the device path takes roots below %d", d, maxRanks)
	}
	return nil
}

func dtOrd(d opDesc) uint32 {
	switch dt := d.dt; {
	case d.bytes:
		return 31
	case dt < 12:
		return uint32(dt)
	case dt >= 64 && dt <= 68:
		return 12 + uint32(dt-64)
	}
	return 30
}

func opOrd(d opDesc) uint32 {
	switch op := d.op; {
	case !d.hasOp:
		return 15
	case op < 5:
		return uint32(op)
	case op >= 64 && op <= 66:
		return 5 + uint32(op-64)
	}
	return 14
}

// words are the descriptor's two fields (each below 2^30): shape = kind | dtype<<4 |
// op<<9 | (root+1)<<13 | count>>30 << 23, and count's low 30 bits.
func (d opDesc) words() (shape, count uint32) {
	shape = uint32(d.kind)&15 | dtOrd(d)<<4 | opOrd(d)<<9 | uint32(d.root+1)&1023<<13 | uint32(d.count>>30)&127<<23
	return shape, uint32(d.count) & fieldMask
}

// peerDesc is a descriptor as read back from a peer's words: its fields, to compare
// one by one with this rank's.
type peerDesc struct {
	kind, dt, op, root uint32
	count              uint64
}

func decodeDesc(shape, count uint32) peerDesc {
	return peerDesc{kind: shape & 15, dt: shape >> 4 & 31, op: shape >> 9 & 15, root: shape >> 13 & 1023,
		count: uint64(shape>>23&127)<<30 | uint64(count)}
}

// differences names the fields in which p differs from d ("count: 1000 here, 3000
// there"), or nil.
func (d opDesc) differences(p peerDesc) []string {
	mine := decodeDesc(d.words())
	var diffs []string
	if mine.kind != p.kind {
		diffs = append(diffs, fmt.Sprintf("collective: %s here, %s there", d.kind, opKind(p.kind)))
	}
	if mine.dt != p.dt {
		diffs = append(diffs, fmt.Sprintf("dtype: %s here, %s there", dtName(mine.dt), dtName(p.dt)))
	}
	if mine.op != p.op {
		diffs = append(diffs, fmt.Sprintf("reduction: %s here, %s there", opName(mine.op), opName(p.op)))
	}
	if mine.root != p.root {
		diffs = append(diffs, fmt.Sprintf("root: %d here, %d there", int(mine.root)-1, int(p.root)-1))
	}
	if mine.count != p.count {
		unit := "elements"
		if d.bytes {
			unit = "bytes"
		}
		diffs = append(diffs, fmt.Sprintf("count: %d here, %d there (%s)", mine.count, p.count, unit))
	}
	return diffs
}

func dtName(o uint32) string {
	switch {
	case o == 31:
		return "bytes (no dtype)"
	case o < 12:
		return reduce.DataType(o).String()
	case o < 17:
		return reduce.DataType(64 + o - 12).String()
	}
	return fmt.Sprintf("dtype #%d", o)
}

func opName(o uint32) string {
	switch {
	case o == 15:
		return "none"
	case o < 5:
		return reduce.RedOp(o).String()
	case o < 8:
		return reduce.RedOp(64 + o - 5).String()
	}
	return fmt.Sprintf("reduction #%d", o)
}

// publish writes d into this rank's slot of every peer's header, on the round's
// stream, before the round's first flag.
func (r round) publish(d opDesc) error {
	shape, count := d.words()
	for q := range r.s.nranks {
		if q == r.s.rank {
			continue
		}
		for _, w := range []struct {
			off int
			v   uint32
		}{{descShape, shape}, {descShapeNeg, -shape}, {descCount, count}, {descCountNeg, -count}} {
			if err := r.s.d.StreamWriteValue32(r.st, r.s.inbox(q, r.s.rank, w.off), w.v); err != nil {
				return err
			}
		}
	}
	return nil
}

// agree waits, on the round's stream, for every peer to be in this round (its ready
// flag) and for its descriptor to equal d.
func (r round) agree(d opDesc) error {
	shape, count := d.words()
	for p := range r.s.nranks {
		if p == r.s.rank {
			continue
		}
		if err := r.wait(p, flagReady, r.n); err != nil {
			return err
		}
		for _, w := range []struct {
			off int
			v   uint32
		}{{descShape, shape}, {descShapeNeg, -shape}, {descCount, count}, {descCountNeg, -count}} {
			if err := r.s.d.StreamWaitValue32(r.st, r.s.flag(p, w.off), w.v); err != nil {
				return err
			}
		}
	}
	return nil
}
