package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// When a collective fails or times out, the link error alone names only the peer this
// rank was talking to, which may itself be waiting for someone else. So the failing
// rank asks every peer, over the point-to-point channel (which the collective's failure
// leaves open), where it stands, and names the rank(s) that are really behind, dead or
// calling something else:
//
//	all_reduce #5 (float32 x 1024, sum): timed out after 30s waiting for rank 1 ...
//	[ranks: rank 2 has not called operation #5 (its last is #4 all_reduce ...); rank 1 is waiting in #5 too]

// statusWait bounds how long a failing rank waits for its peers' reports.
const statusWait = 2 * time.Second

// lostStatusWait bounds that wait where the failure's cause is already known (a lost
// rank, which the error names): the reports only add detail, and a 16-host job whose
// host was cut off waited the whole 2 s for the ranks busy with their own failure, so
// that the last survivors reported the loss past the heartbeat timeout (5.1-5.4 s after
// the cut, with a 5 s timeout; the first at 4.3 s; 4.8-5.2 s with a 500 ms wait).
const lostStatusWait = 250 * time.Millisecond

// statusReport is what a rank tells a peer that asks where it stands.
type statusReport struct {
	Issued     uint64 `json:"issued"`      // collectives issued on this communicator
	IssuedOp   string `json:"issued_op"`   // the last one issued, as describe renders it
	Running    string `json:"running"`     // the one the executor runs now, "" if idle
	RunningSeq uint64 `json:"running_seq"` // its number
	Finished   uint64 `json:"finished"`    // collectives finished (or failed)
	Err        string `json:"err"`         // what broke the communicator, if anything
}

// status reports this communicator's progress (for a peer's diagnosis).
func (c *Comm) status() statusReport {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := statusReport{Issued: c.seq, IssuedOp: c.issuedOp, Finished: c.finishedSeq, Err: c.brokenText}
	if c.running != nil {
		r.Running, r.RunningSeq = c.running.String(), c.running.seq
	}
	return r
}

// diagnose asks every peer for its status and explains, for this rank's failed
// operation o, which ranks are behind, gone, or running something else. It returns ""
// when there is nothing to add (no point-to-point channels, or every peer is in o);
// failed is o's error, whose own words are not repeated; wait bounds the wait for the
// peers' answers.
func (c *Comm) diagnose(o *op, failed error, wait time.Duration) string {
	if c.p2p == nil {
		return ""
	}
	reports, errs := c.p2p.queryStatus(o.seq, wait)
	mine := o.String()
	var missing, gone []int
	var notes []string
	for p := 0; p < c.nranks; p++ {
		if p == c.rank {
			continue
		}
		if err, ok := errs[p]; ok {
			var left *peerLeftError
			if errors.As(err, &left) {
				notes = append(notes, fmt.Sprintf("rank %d left: %s", p, left.reason))
				continue
			}
			gone = append(gone, p)
			if errors.Is(err, ErrTimeout) { // missed heartbeats
				notes = append(notes, fmt.Sprintf("rank %d is gone: %v", p, err))
			} else {
				notes = append(notes, fmt.Sprintf("rank %d is gone: its connection ended without a goodbye (%v): did it exit or crash?", p, err))
			}
			continue
		}
		r, ok := reports[p]
		if !ok {
			notes = append(notes, fmt.Sprintf("rank %d did not answer within %v (hung, stopped or overloaded?)", p, wait))
			continue
		}
		theirs := "" // the peer's own description of operation #o.seq, where known
		switch {
		case r.RunningSeq == o.seq:
			theirs = r.Running
		case r.Issued == o.seq:
			theirs = r.IssuedOp
		}
		switch {
		case r.Issued < o.seq:
			missing = append(missing, p)
			last := "none yet"
			if r.IssuedOp != "" {
				last = r.IssuedOp
			}
			notes = append(notes, fmt.Sprintf("rank %d has not called operation #%d (its last call: %s)", p, o.seq, last))
		case r.RunningSeq != 0 && r.RunningSeq < o.seq:
			notes = append(notes, fmt.Sprintf("rank %d is still in %s", p, r.Running))
		case theirs != "" && theirs != mine && !namesMismatchWith(failed, p):
			notes = append(notes, fmt.Sprintf("rank %d called %s but rank %d called %s", p, theirs, c.rank, mine))
		case r.Err != "" && !namesMismatchWith(failed, p):
			notes = append(notes, fmt.Sprintf("rank %d failed: %s", p, r.Err))
		}
	}
	if len(notes) == 0 {
		return ""
	}
	head := ""
	if len(missing) > 0 {
		head = fmt.Sprintf("missing: %s; ", rankList(missing))
	}
	if len(gone) > 0 {
		head += fmt.Sprintf("gone: %s; ", rankList(gone))
	}
	return head + strings.Join(notes, "; ")
}

func rankList(ranks []int) string {
	sort.Ints(ranks)
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprint(r)
	}
	word := "rank "
	if len(ranks) > 1 {
		word = "ranks "
	}
	return word + strings.Join(parts, ", ")
}

// queryStatus asks every reachable peer for its status report and waits up to wait for
// the answers. Peers whose channel has failed are returned in errs.
func (e *p2pEngine) queryStatus(seq uint64, wait time.Duration) (map[int]statusReport, map[int]error) {
	reports, errs := map[int]statusReport{}, map[int]error{}
	answers := make(chan statusAnswer, e.nranks)
	e.mu.Lock()
	if e.closed != nil {
		e.mu.Unlock()
		return reports, errs
	}
	asked := map[int]bool{}
	e.statusAnswers = answers
	for _, pp := range e.peers {
		if pp == nil {
			continue
		}
		if pp.err != nil {
			errs[pp.rank] = errors.Unwrap(pp.err)
			continue
		}
		e.enqueue(pp, &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgStatusQuery, Seq: seq},
			deadline: time.Now().Add(wait)}, true)
		asked[pp.rank] = true
	}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.statusAnswers = nil
		e.mu.Unlock()
	}()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(asked) > 0 {
		select {
		case a := <-answers:
			if !asked[a.from] {
				continue // a second word from one peer (it answered, then left)
			}
			delete(asked, a.from)
			if a.err != nil {
				errs[a.from] = a.err
			} else {
				reports[a.from] = a.report
			}
		case <-timer.C:
			return reports, errs
		}
	}
	return reports, errs
}

type statusAnswer struct {
	from   int
	report statusReport
	err    error
}

// answerStatus sends this rank's status report to pp (on its reader goroutine).
func (e *p2pEngine) answerStatus(pp *p2pPeer) {
	if e.status == nil {
		return
	}
	b, err := json.Marshal(e.status())
	if err != nil || len(b) > transport.MaxStatusBytes {
		b = []byte("{}")
	}
	e.mu.Lock()
	if pp.err == nil {
		e.enqueue(pp, &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgStatus, Len: uint64(len(b))},
			payload: b, deadline: time.Now().Add(statusWait)}, true)
	}
	e.mu.Unlock()
}

// readStatus reads a peer's status report and hands it to a waiting queryStatus.
func (e *p2pEngine) readStatus(pp *p2pPeer, h transport.MsgHeader) error {
	if h.Len > transport.MaxStatusBytes {
		return fmt.Errorf("rank %d sent a status report of %d bytes, above the %d-byte limit", pp.rank, h.Len, transport.MaxStatusBytes)
	}
	b := make([]byte, h.Len)
	if err := pp.conn.ReadPayload(b, time.Now().Add(statusWait)); err != nil {
		return err
	}
	a := statusAnswer{from: pp.rank}
	if err := json.Unmarshal(b, &a.report); err != nil {
		a.err = fmt.Errorf("unreadable status report: %w", err)
	}
	e.mu.Lock()
	ch := e.statusAnswers
	e.mu.Unlock()
	if ch != nil {
		select {
		case ch <- a:
		default:
		}
	}
	return nil
}

// byeWait bounds how long closing waits for the goodbyes to go out. Closing returns as
// soon as every goodbye is written, so the bound is only reached when a peer stops
// reading; it must still outlast a busy host's scheduling delays: with 256 ranks on 2
// cores a rank's writer could wait over 200 ms for a core, its goodbye went out after
// its connections closed, and peers still finishing the last operation took the
// rank for dead and failed that operation (bench/scale, 1 run in 5).
const byeWait = 2 * time.Second

// peerLeftError is how a peer's channel ends when the peer closed its communicator on
// purpose (it said why), as opposed to dying.
type peerLeftError struct{ reason string }

func (e *peerLeftError) Error() string { return "it closed its communicator: " + e.reason }
func (e *peerLeftError) Unwrap() error { return transport.ErrPeerClosed }

// sayBye tells every live peer that this rank is leaving and why, waiting briefly for
// the frames to go out, so that peers can tell a rank that left from one that died.
func (e *p2pEngine) sayBye(reason string) {
	e.tellEveryPeer(transport.MsgHeader{Kind: transport.MsgBye}, reason, byeWait, true)
}

// tellEveryPeer sends every live peer a control frame h carrying a short text (cut to
// fit a status frame) and waits until the frames are written, at most wait, so that
// they go out even if this process ends right after. Nothing is sent once the engine
// closed, nor, unless evenLeaving, while it is saying goodbye.
func (e *p2pEngine) tellEveryPeer(h transport.MsgHeader, text string, wait time.Duration, evenLeaving bool) {
	b := []byte(truncate(text, transport.MaxStatusBytes-16))
	h.Len = uint64(len(b))
	var sent []chan struct{}
	e.mu.Lock()
	if e.closed == nil && (evenLeaving || e.leaving == nil) {
		for _, pp := range e.peers {
			if pp == nil || pp.err != nil {
				continue
			}
			f := &p2pFrame{h: h, payload: b, deadline: time.Now().Add(wait), written: make(chan struct{})}
			e.enqueue(pp, f, true)
			sent = append(sent, f.written)
		}
	}
	e.mu.Unlock()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for _, ch := range sent {
		select {
		case <-ch:
		case <-timer.C:
			return
		}
	}
}

// readNote reads the short text that follows a peer's control frame h (a goodbye, a
// refusal), refusing one longer than a status frame; what names the frame in errors.
func (e *p2pEngine) readNote(pp *p2pPeer, h transport.MsgHeader, what string) (string, error) {
	if h.Len > transport.MaxStatusBytes {
		return "", fmt.Errorf("rank %d sent %s of %d bytes, above the %d-byte limit", pp.rank, what, h.Len, transport.MaxStatusBytes)
	}
	b := make([]byte, h.Len)
	if err := pp.conn.ReadPayload(b, time.Now().Add(statusWait)); err != nil {
		return "", err
	}
	return string(b), nil
}

// readBye reads a peer's goodbye; the channel then ends, failing what is pending on
// it with the peer's reason.
func (e *p2pEngine) readBye(pp *p2pPeer, h transport.MsgHeader) error {
	reason, err := e.readNote(pp, h, "a goodbye")
	if err != nil {
		return err
	}
	return &peerLeftError{reason: reason}
}

// Flags of a MsgLost frame (in its Seq).
const (
	lostNow    = 1 << iota // break the communicator at once, not failGrace later
	lostSilent             // the rank fell silent (missed heartbeats) rather than died
)

// tellLost tells every live peer but the lost one that rank is lost, and why (see
// lost.go); now: the peers break their communicator at once, not failGrace later;
// silent: the rank fell silent rather than died. It does not wait for the frames to
// go out.
func (e *p2pEngine) tellLost(rank int, reason string, now, silent bool) {
	b := []byte(truncate(reason, transport.MaxStatusBytes-16))
	var flags uint64
	if now {
		flags |= lostNow
	}
	if silent {
		flags |= lostSilent
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed != nil || e.leaving != nil {
		return
	}
	for _, pp := range e.peers {
		if pp == nil || pp.err != nil || pp.rank == rank {
			continue
		}
		e.enqueue(pp, &p2pFrame{h: transport.MsgHeader{Kind: transport.MsgLost, Tag: int64(rank), Seq: flags, Len: uint64(len(b))},
			payload: b, deadline: time.Now().Add(statusWait)}, true)
	}
}

// readLost reads a peer's news that a rank is lost and hands it to onLost.
func (e *p2pEngine) readLost(pp *p2pPeer, h transport.MsgHeader) error {
	if h.Len > transport.MaxStatusBytes {
		return fmt.Errorf("rank %d sent a lost-rank report of %d bytes, above the %d-byte limit", pp.rank, h.Len, transport.MaxStatusBytes)
	}
	b := make([]byte, h.Len)
	if err := pp.conn.ReadPayload(b, time.Now().Add(statusWait)); err != nil {
		return err
	}
	if h.Tag < 0 || h.Tag >= int64(e.nranks) || h.Tag == int64(pp.rank) || h.Seq&^(lostNow|lostSilent) != 0 {
		return fmt.Errorf("rank %d sent a lost-rank report about rank %d (flags %#x): not a rank it can report", pp.rank, h.Tag, h.Seq)
	}
	if e.onLost != nil {
		e.onLost(int(h.Tag), pp.rank, string(b), h.Seq&lostNow != 0, h.Seq&lostSilent != 0)
	}
	return nil
}

// failRank fails the channel to rank r, if there is one (see failPeer).
func (e *p2pEngine) failRank(r int, err error) {
	if pp := e.peer(r); pp != nil {
		e.failPeer(pp, err)
	}
}

// idle reports whether every operation issued on c has finished and none runs: a
// peer that goes away now fails nothing in flight.
func (c *Comm) idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running == nil && c.finishedSeq == c.seq
}

// namesMismatchWith reports whether err is a mismatch that already says what rank
// peer called (mismatchText), so that the diagnosis need not say it again, nor the
// peer's own failure, which is the same mismatch seen from its side.
func namesMismatchWith(err error, peer int) bool {
	return errors.Is(err, ErrMismatch) && strings.Contains(err.Error(), fmt.Sprintf("rank %d called ", peer))
}
