package transport

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Errors returned by a Link wrap one of these (and the underlying
// cause), so callers can match them with errors.Is.
var (
	// ErrTimeout means the deadline passed before the peer sent or accepted data.
	ErrTimeout = errors.New("timed out")
	// ErrPeerClosed means the connection to the peer closed or broke.
	ErrPeerClosed = errors.New("connection closed")
	// ErrMismatch means the peer sent a frame for a different operation than expected.
	ErrMismatch = errors.New("mismatched operation")
)

// Header describes one frame. The sender fills every field; the receiver states the
// header it expects, and a frame whose header differs is a mismatch (the peer is
// running a different collective, dtype, size, op or root). Flags alone is not part of
// the match: it carries what the sender knew when it sent the frame, and a successful
// Recv hands the frame's Flags back in want.Flags.
type Header struct {
	Seq    uint64 // operation sequence number on the communicator
	Kind   uint8  // operation kind (values defined by core)
	DType  uint8  // data type (NCCL numbering)
	Op     uint8  // reduction op (NCCL numbering), 0 where none
	Algo   uint8  // algorithm (values defined by core)
	Root   int32  // root rank, -1 where none
	Count  uint64 // element count describing the whole operation
	Offset uint64 // byte offset of this payload within the operation
	Len    uint32 // payload length in bytes
	// Epoch is the communicator generation that sent the frame. A receiver drops a
	// frame of an older generation (see StaleHandler) and never mixes it into its own.
	// At most MaxEpoch.
	Epoch uint32
	// Flags are facts about the sender that ride on the frame (FlagZeroCopyReady).
	Flags uint8
}

// MaxEpoch is the largest Epoch a frame carries (its word on the wire shares the top
// byte with Flags).
const MaxEpoch = 1<<24 - 1

// FlagZeroCopyReady says that the sender, and every rank whose frames of this
// operation it had received when it sent this one, could run the operation on its
// buffers where they lie (core's zero-copy collectives learn from it).
const FlagZeroCopyReady uint8 = 1

// Matches reports whether got is the frame want describes: every field but Flags equal.
func (got *Header) Matches(want *Header) bool {
	g, w := *got, *want
	g.Flags, w.Flags = 0, 0
	return g == w
}

// StaleHandler is told about each frame a link dropped because it came from an older
// communicator generation (got.Epoch below the receiver's).
type StaleHandler func(peer int, got Header)

// StaleDropper is implemented by links that drop older generations' frames; core
// passes each one a handler that logs and counts the drops.
type StaleDropper interface {
	OnStale(h StaleHandler)
}

// IsStale reports whether a frame with header got belongs to a generation older than
// the one the receiver expects.
func IsStale(got, want *Header) bool { return got.Epoch < want.Epoch }

// MismatchError reports a frame whose header is not the one the receiver expected.
type MismatchError struct {
	Peer int
	Want Header
	Got  Header
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("rank %d sent %+v, expected %+v", e.Peer, e.Got, e.Want)
}

// Unwrap makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// Link is a bidirectional, ordered, framed channel to one peer rank.
//
// One goroutine may send while another receives; two concurrent Sends (or two
// concurrent Recvs) on one Link are not allowed. Every call has a deadline.
type Link interface {
	// Peer is the rank at the other end.
	Peer() int
	// Send writes one frame: h (with h.Len set to len(p)) followed by p.
	Send(h *Header, p []byte, deadline time.Time) error
	// Recv reads the next frame into p. The frame's header must equal want with
	// want.Len = len(p); otherwise Recv returns a *MismatchError and does not read
	// the payload (the link is then out of step and must be closed).
	Recv(want *Header, p []byte, deadline time.Time) error
	// Fail shuts the link down after an error: receiving stops at once, frames being
	// sent get grace to finish (so the peer can still read them, and see for itself
	// what went wrong), then the link closes. Later Send and Recv calls fail.
	Fail(grace time.Duration)
	// Close closes the link at once; blocked Send and Recv calls return.
	Close() error
}

// ImmediateSender is implemented by links with a buffer of their own (shared-memory
// rings) that can take a frame whole without waiting for the peer: a caller that also
// receives then does both on its own goroutine, one after the other, instead of
// starting a goroutine to send (on a host with more ranks than cores, handing the
// processor between those goroutines' threads cost more than the collective's work).
type ImmediateSender interface {
	// TrySend sends the frame as Send would if the link can take all of it now, and
	// reports whether it did; when it reports false nothing was sent (the link is
	// full, or failed or closed: Send then says why).
	TrySend(h *Header, p []byte) (bool, error)
}

// Keeper is implemented by links that keep what they sent until the peer has
// acknowledged it, to send it again after a broken connection (tcp sessions between
// hosts). They can keep the caller's memory by reference instead of a copy, for a
// caller that leaves it unchanged for a while (a collective, until it ends).
type Keeper interface {
	// SendKept is Send, except that p is kept by reference: the caller must not
	// change it until Settle returns.
	SendKept(h *Header, p []byte, deadline time.Time) error
	// Settle hands back the memory of every SendKept before it: what the peer has
	// not acknowledged yet is copied (or, past the process's budget, waited for until
	// deadline).
	Settle(deadline time.Time) error
}

// PieceReceiver is implemented by links that can hand a frame's payload to the caller
// in place, piece by piece, instead of copying it into a buffer: a reduction then reads
// the peer's bytes straight out of shared memory, saving one copy of every byte.
type PieceReceiver interface {
	// RecvPieces reads the next frame, whose header must equal want with want.Len = n
	// (as for Recv), and hands consecutive pieces of its payload to sink. Every piece
	// holds whole elements of elemSize bytes (n must be a multiple of elemSize).
	// An error from sink ends the call (the link is then out of step and must be closed).
	RecvPieces(want *Header, n, elemSize int, deadline time.Time, sink PieceSink) error
}

// PieceSink consumes a payload handed out in place by a PieceReceiver.
type PieceSink interface {
	// Piece is called with the payload's bytes [off, off+len(piece)); it must not keep
	// piece after it returns.
	Piece(off int, piece []byte) error
}
