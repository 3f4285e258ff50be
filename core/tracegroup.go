package core

import (
	"fmt"
	"sync"
	"time"
)

// Trace groups: one collective a caller made that runs as several operations of the
// communicator (capi's staged path pipelined by chunk: one operation per chunk, or
// all-to-alls when the GPU reduces). Each of them still takes its own sequence number
// (the frames carry it) and slot of the flight recorder, but the recorder shows the
// group as one entry, as the caller called it: its kind, type, count and number of
// chunks, from the first operation's sequence number to the last one's (Seq, LastSeq),
// described by its first operation (its kind, type, reduction and root, and the count
// its frames carry: WithWireCount; capi issues a chunk, or a one-element operation of
// the caller's kind, first),
// started when the first one starts, failed with the first failure, completed when
// every operation issued has completed. Errors and status reports name the caller's
// collective beside the operation that failed.

// TraceGroup is one caller's collective that runs as several operations.
type TraceGroup struct {
	chunks int

	mu       sync.Mutex
	kind     Kind // the first operation's, as the caller called it
	dtype    DataType
	redop    RedOp
	root     int
	count    uint64
	first    uint64 // the first operation's sequence number (0: none enqueued yet)
	last     uint64 // the last one's so far
	ops      int    // operations enqueued
	ended    int    // operations finished (or failed)
	issued   int    // operations issued in all (SetIssued); -1 until known
	state    TraceState
	algo     Algo
	enqueued int64 // unix nanoseconds, as traceSlot's
	started  int64
	finished int64
	err      string
}

// NewTraceGroup makes the group of a caller's collective that runs as chunks chunks,
// issued as operations given WithTraceGroup; the first one issued describes it.
func NewTraceGroup(chunks int) *TraceGroup {
	return &TraceGroup{chunks: chunks, issued: -1}
}

// WithTraceGroup makes the operation one of g's.
func WithTraceGroup(g *TraceGroup) OpOption { return func(o *op) { o.group = g } }

// SetIssued says how many operations were issued for the group in all: once that many
// have finished, its entry is finished.
func (g *TraceGroup) SetIssued(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.issued = n
	g.endLocked(time.Now().UnixNano())
}

// String describes the caller's collective, as describe does an operation.
func (g *TraceGroup) String() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return fmt.Sprintf("%s in %d chunks", describe(g.kind, g.first, g.dtype, g.count, g.redop, g.root), g.chunks)
}

// add records that o, enqueued at now (unix nanoseconds), is the group's: its part
// number, from 1. The communicator's lock is held (sequence numbers are in order).
func (g *TraceGroup) add(o *op, now int64) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.first == 0 {
		g.first, g.enqueued = o.seq, now
		g.kind, g.dtype, g.redop, g.root, g.count = o.kind, o.dtype, o.redop, o.root, uint64(o.count)
		if o.wire != 0 {
			g.count = o.wire
		}
	}
	g.last = o.seq
	g.ops++
	return g.ops
}

// start records that one of its operations started.
func (g *TraceGroup) start(now int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == TraceQueued {
		g.state, g.started = TraceStarted, now
	}
}

// end records that one of its operations finished, with algo and err.
func (g *TraceGroup) end(algo Algo, err error, now int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ended++
	g.algo = algo
	if err != nil && g.state != TraceFailed {
		g.state, g.err, g.finished = TraceFailed, err.Error(), now
	}
	g.endLocked(now)
}

// endLocked completes the entry once every issued operation has finished. g.mu held.
func (g *TraceGroup) endLocked(now int64) {
	if g.issued < 0 || g.ended < g.issued || g.state == TraceFailed || g.state == TraceCompleted {
		return
	}
	g.state, g.finished = TraceCompleted, now
	if g.started == 0 {
		g.started = now
	}
}

// entry is the group's flight-recorder entry.
func (g *TraceGroup) entry() TraceEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	return TraceEntry{Seq: g.first, LastSeq: g.last, Chunks: g.chunks, Kind: g.kind, Path: PathHost, DType: g.dtype,
		RedOp: g.redop, Algo: g.algo, State: g.state, Root: g.root, Count: g.count,
		Bytes: g.count * uint64(g.dtype.Size()), Enqueued: unixTime(g.enqueued), Started: unixTime(g.started),
		Finished: unixTime(g.finished), Err: g.err}
}
