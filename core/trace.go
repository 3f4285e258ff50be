package core

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The flight recorder: each communicator keeps its last GONCCL_TRACE_BUFFER_SIZE
// collectives in a ring (what was called, with which algorithm, how far it got, when,
// and why it failed). With GONCCL_TRACE_DUMP_DIR set, every rank writes the ring to a
// JSON file there when an operation first fails (a timeout, a lost peer, a mismatch)
// and again when the communicator is destroyed or aborted; `python -m gonccl.trace
// DIR` then reads every rank's file and says which rank is behind, or stuck, on which
// operation. Comm.DumpTrace writes it on demand.
//
// Recording costs one ring slot per operation (no allocation) and a mutex; the slot
// of operation seq is ring[(seq-1) % size], as sequence numbers are dense.

// TraceState is how far a recorded operation got.
type TraceState uint8

// Operation states, in order.
const (
	TraceQueued    TraceState = iota // enqueued, waiting for the executor
	TraceStarted                     // the executor is running it
	TraceCompleted                   // finished without error
	TraceFailed                      // finished with an error
	TraceRefused                     // this rank refused the call (Comm.Refuse): it never ran
)

func (s TraceState) String() string {
	switch s {
	case TraceQueued:
		return "queued"
	case TraceStarted:
		return "started"
	case TraceCompleted:
		return "completed"
	case TraceFailed:
		return "failed"
	case TraceRefused:
		return "refused"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Where a recorded operation ran (TraceEntry.Path).
const (
	PathHost   = "host"   // the executor ran it (with GPU buffers: staged through host memory)
	PathDevice = "device" // capi's device path enqueued it on a CUDA stream (see devtrace.go)
)

// TraceEntry is one recorded operation. For an operation of the device path (Path
// "device"), queued means issued but its work not yet on the stream, started means
// enqueued on the GPU and not finished, and completed means the GPU finished it
// (Finished is when the recorder saw that: an upper bound).
type TraceEntry struct {
	Seq      uint64
	Kind     Kind
	Path     string // PathHost or PathDevice
	DType    DataType
	RedOp    RedOp
	Algo     Algo
	State    TraceState
	Root     int
	Count    uint64 // elements, as the operation counts them (per rank for all_gather, ...)
	Bytes    uint64 // Count x element size
	Enqueued time.Time
	Started  time.Time // zero until started
	Finished time.Time // zero until finished
	Err      string    // the error, once failed
	// A caller's collective that ran as several operations (a TraceGroup: capi's staged
	// path pipelined by chunk) is one entry: Seq is its first operation's number,
	// LastSeq its last one's so far, Chunks its number of chunks. 0 for other entries.
	LastSeq uint64
	Chunks  int
	// A send or receive (Kind KindSend or KindRecv, device path only: see p2ptrace.go):
	// Seq is the last collective's number before it, Peer the rank on the other side,
	// P2PSeq its number among this rank's sends to (receives from) Peer, from 1. Both
	// are 0 for a collective.
	Peer   int
	P2PSeq uint64
}

type traceSlot struct {
	seq                         uint64
	kind                        Kind
	dtype                       DataType
	redop                       RedOp
	algo                        Algo
	state                       TraceState
	root                        int32
	count                       uint64
	enqueued, started, finished int64 // unix nanoseconds, 0: not yet
	err                         string
	device                      bool                 // the device path's (see devtrace.go)
	group                       *TraceGroup          // the caller's collective it is part of (tracegroup.go)
	poll                        func() (bool, error) // device path, started: has the GPU finished it?
	peer                        int32                // send/recv (p2ptrace.go): the other rank
	pseq, after                 uint64               // send/recv: P2PSeq, and the collective's Seq before it
}

// entry is the slot's TraceEntry (not for a group's operations: TraceGroup.entry).
func (s *traceSlot) entry() TraceEntry {
	path, seq, peer := PathHost, s.seq, 0
	if s.device {
		path = PathDevice
	}
	if s.kind == KindSend || s.kind == KindRecv {
		seq, peer = s.after, int(s.peer)
	}
	return TraceEntry{Seq: seq, Kind: s.kind, Path: path, DType: s.dtype, RedOp: s.redop, Algo: s.algo,
		State: s.state, Root: int(s.root), Count: s.count, Bytes: s.count * uint64(s.dtype.Size()),
		Enqueued: unixTime(s.enqueued), Started: unixTime(s.started), Finished: unixTime(s.finished), Err: s.err,
		Peer: peer, P2PSeq: s.pseq}
}

// flightRecorder is a communicator's ring of recent operations. A nil recorder
// records nothing.
type flightRecorder struct {
	mu           sync.Mutex
	ring         []traceSlot
	comm         string // communicator id: the same on every rank, unique per communicator
	rank, nranks int
	dir          string // GONCCL_TRACE_DUMP_DIR, "" for none
	dumpedFail   bool   // the first failure has been dumped
	// Device-path sends and receives (p2ptrace.go): their ring, made at the first, of
	// entries numbered 1..p2pN, and the sends and receives so far per peer (2*peer,
	// 2*peer+1).
	p2p      []traceSlot
	p2pN     uint64
	p2pCount []uint64
}

// newFlightRecorder returns a recorder of size slots, or nil if size is 0.
func newFlightRecorder(size, rank, nranks int, dir string) *flightRecorder {
	if size <= 0 {
		return nil
	}
	return &flightRecorder{ring: make([]traceSlot, size), comm: "local", rank: rank, nranks: nranks, dir: dir}
}

// commIDOf names the communicator a unique id creates, without revealing its secret.
func commIDOf(id *UniqueID) string {
	sum := sha256.Sum256(id[:])
	return hex.EncodeToString(sum[:6])
}

func (f *flightRecorder) setComm(id string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.comm = id
	f.mu.Unlock()
}

// slot returns seq's slot if it still holds seq. mu held.
func (f *flightRecorder) slot(seq uint64) *traceSlot {
	s := &f.ring[(seq-1)%uint64(len(f.ring))]
	if s.seq != seq {
		return nil
	}
	return s
}

func (f *flightRecorder) enqueued(o *op) {
	if f == nil {
		return
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	s := &f.ring[(o.seq-1)%uint64(len(f.ring))]
	*s = traceSlot{seq: o.seq, kind: o.kind, dtype: o.dtype, redop: o.redop, root: int32(o.root),
		count: uint64(o.count), enqueued: now, group: o.group}
	f.mu.Unlock()
}

func (f *flightRecorder) started(seq uint64) {
	if f == nil {
		return
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	if s := f.slot(seq); s != nil {
		s.state, s.started = TraceStarted, now
	}
	f.mu.Unlock()
}

// finished records the end of seq and reports whether this is the communicator's
// first failure (the moment to dump).
func (f *flightRecorder) finished(seq uint64, algo Algo, err error) (firstFailure bool) {
	if f == nil {
		return false
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.slot(seq); s != nil {
		s.finished, s.algo, s.state = now, algo, TraceCompleted
		if err != nil {
			s.state, s.err = TraceFailed, err.Error()
		}
	}
	if err != nil && !f.dumpedFail {
		f.dumpedFail = true
		return true
	}
	return false
}

// empty reports whether nothing was ever recorded.
func (f *flightRecorder) empty() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ring[0].seq == 0
}

// entries returns the recorded operations, oldest first.
func (f *flightRecorder) entries() []TraceEntry {
	if f == nil {
		return nil
	}
	f.pollDevice()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []TraceEntry
	var newest uint64
	for i := range f.ring {
		newest = max(newest, f.ring[i].seq)
	}
	first := uint64(1)
	if n := uint64(len(f.ring)); newest > n {
		first = newest - n + 1
	}
	var shown map[*TraceGroup]bool // a group's operations are one entry, where its first one is
	for seq := first; seq <= newest; seq++ {
		s := f.slot(seq)
		if s == nil {
			continue
		}
		if g := s.group; g != nil {
			if !shown[g] {
				if shown == nil {
					shown = map[*TraceGroup]bool{}
				}
				out = append(out, g.entry())
				shown[g] = true
			}
			continue
		}
		out = append(out, s.entry())
	}
	return mergeByTime(out, f.p2pEntries())
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// traceFile is the JSON a rank writes; python/gonccl/trace.py reads it.
type traceFile struct {
	Version  int         `json:"version"`
	Comm     string      `json:"comm"`
	Rank     int         `json:"rank"`
	NRanks   int         `json:"nranks"`
	Pid      int         `json:"pid"`
	Host     string      `json:"host"`
	Reason   string      `json:"reason"`
	DumpedAt float64     `json:"dumped_at"` // unix seconds
	Ops      []traceJSON `json:"ops"`
}

type traceJSON struct {
	Seq      uint64   `json:"seq"`
	Op       string   `json:"op"`
	DType    string   `json:"dtype"`
	Count    uint64   `json:"count"`
	Bytes    uint64   `json:"bytes"`
	Root     int      `json:"root"`
	RedOp    string   `json:"redop,omitempty"`
	Algo     string   `json:"algo"`
	Path     string   `json:"path"` // "host" or "device"
	State    string   `json:"state"`
	Enqueued float64  `json:"enqueued"`
	Started  *float64 `json:"started"`
	Finished *float64 `json:"finished"`
	Error    string   `json:"error,omitempty"`
	Chunks   int      `json:"chunks,omitempty"`   // a collective run as several operations (TraceEntry.Chunks)
	LastSeq  uint64   `json:"last_seq,omitempty"` // its last operation's number
	Peer     *int     `json:"peer,omitempty"`     // a send/recv: the other rank
	P2PSeq   uint64   `json:"p2p_seq,omitempty"`  // a send/recv: its number among those with peer
}

func seconds(t time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	s := float64(t.UnixNano()) / 1e9
	return &s
}

// fileName is the recorder's file name in a dump directory.
func (f *flightRecorder) fileName() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprintf("gonccl_trace_%s_rank%d_pid%d.json", f.comm, f.rank, os.Getpid())
}

// dump writes the recorder to path (a directory's default file name if path is a
// directory), atomically.
func (f *flightRecorder) dump(path, reason string) error {
	if f == nil {
		return fmt.Errorf("%w: the flight recorder is off (GONCCL_TRACE_BUFFER_SIZE=0)", ErrInvalidArgument)
	}
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, f.fileName())
	}
	tf := traceFile{Version: 1, Pid: os.Getpid(), Host: hostname(), Reason: reason,
		DumpedAt: float64(time.Now().UnixNano()) / 1e9}
	f.mu.Lock()
	tf.Comm, tf.Rank, tf.NRanks = f.comm, f.rank, f.nranks
	f.mu.Unlock()
	for _, e := range f.entries() {
		j := traceJSON{Seq: e.Seq, Op: e.Kind.String(), DType: e.DType.String(), Count: e.Count, Bytes: e.Bytes,
			Root: e.Root, Algo: e.Algo.String(), Path: e.Path, State: e.State.String(), Enqueued: *seconds(e.Enqueued),
			Started: seconds(e.Started), Finished: seconds(e.Finished), Error: e.Err, Chunks: e.Chunks, LastSeq: e.LastSeq}
		if e.Kind.reduces() {
			j.RedOp = e.RedOp.String()
		}
		if e.IsP2P() {
			j.Peer, j.P2PSeq = &e.Peer, e.P2PSeq
		}
		tf.Ops = append(tf.Ops, j)
	}
	b, err := json.MarshalIndent(tf, "", " ")
	if err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.tmp%d", path, os.Getpid())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the flight recorder: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return errors.Join(fmt.Errorf("writing the flight recorder: %w", err), os.Remove(tmp))
	}
	return nil
}

// autoDump writes the recorder into GONCCL_TRACE_DUMP_DIR, if set, logging the outcome.
func (c *Comm) autoDump(reason string) {
	f := c.trace
	if f == nil || f.dir == "" || f.empty() {
		return
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		c.logs.coll.Warn(fmt.Sprintf("flight recorder: %v", err))
		return
	}
	path := filepath.Join(f.dir, f.fileName())
	if err := f.dump(path, reason); err != nil {
		c.logs.coll.Warn(fmt.Sprintf("flight recorder: %v", err))
		return
	}
	c.logs.coll.Info(fmt.Sprintf("flight recorder (%s) written to %s", reason, path))
}

// recordRun runs one operation on the executor, recording it: the executor's one call
// into the recorder.
func (c *Comm) recordRun(o *op) error {
	c.trace.started(o.seq)
	if o.group != nil {
		o.group.start(time.Now().UnixNano())
	}
	err := c.execute(o)
	if o.group != nil {
		o.group.end(o.algo, err, time.Now().UnixNano())
	}
	if c.trace.finished(o.seq, o.algo, err) {
		c.autoDump("failure: " + err.Error())
	}
	return err
}

// Trace returns the operations the flight recorder holds, oldest first (nil if it is
// off).
func (c *Comm) Trace() []TraceEntry { return c.trace.entries() }

// DumpTrace writes the flight recorder as JSON to path, or, if path is a directory,
// to a file named after the communicator, rank and pid inside it.
func (c *Comm) DumpTrace(path string) error {
	if path == "" {
		return invalidf("dump trace: empty path")
	}
	return c.trace.dump(path, "on demand")
}
