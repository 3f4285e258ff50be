package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/gonccl/gonccl/internal/reduce"
	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
)

// Sentinel errors. Every error core returns wraps one of these, so callers (and the C
// ABI's result-code table) can classify failures with errors.Is.
var (
	// ErrTimeout: an operation did not finish within the communicator's timeout.
	ErrTimeout = transport.ErrTimeout
	// ErrPeerClosed: a peer's connection closed or broke (the peer died or failed).
	ErrPeerClosed = transport.ErrPeerClosed
	// ErrMismatch: ranks called different collectives, sizes, dtypes, ops or roots.
	ErrMismatch = transport.ErrMismatch
	// ErrInvalidArgument: the caller passed a bad argument; nothing was sent.
	ErrInvalidArgument = reduce.ErrInvalidArgument
	// ErrNotSupported: a valid request that gonccl does not implement (yet).
	ErrNotSupported = reduce.ErrNotSupported
	// ErrAborted: the communicator was aborted while the operation was pending.
	ErrAborted = errors.New("communicator aborted")
	// ErrClosed: the communicator was destroyed.
	ErrClosed = errors.New("communicator destroyed")
	// ErrInternal: a bug in gonccl: a goroutine panicked (the message names which, the
	// WARN log holds the stack); the operation or communicator it served failed.
	ErrInternal = safego.ErrPanic
)

// OpError is the error of one operation, with the context a user needs to find the
// problem: which rank saw it, on which operation, with which peer.
type OpError struct {
	Rank int    // this rank
	Op   string // operation description, e.g. "all_reduce #12 (float32 x 1024, sum)"
	Peer int    // the peer involved, or -1
	Err  error
	// Diagnosis says where the other ranks stood when a collective failed: which ones
	// had not called it, were gone, or called something else (see Comm.diagnose).
	Diagnosis string
}

func (e *OpError) Error() string {
	if e.Diagnosis != "" {
		return fmt.Sprintf("gonccl rank %d: %s: %v [other ranks: %s]", e.Rank, e.Op, e.Err, e.Diagnosis)
	}
	return fmt.Sprintf("gonccl rank %d: %s: %v", e.Rank, e.Op, e.Err)
}

// Unwrap returns the underlying error.
func (e *OpError) Unwrap() error { return e.Err }

// logText is Error() without the "gonccl rank N: " prefix, for log lines, which
// name the rank already.
func (e *OpError) logText() string {
	if e.Diagnosis != "" {
		return fmt.Sprintf("%s: %v [other ranks: %s]", e.Op, e.Err, e.Diagnosis)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Err)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// timeoutError is a wait for a peer that passed its deadline. It matches ErrTimeout
// and reads "Timed out after 1000 ms waiting for rank 1 (hint)": "Timed out", spaces
// around it, is what torch's own tests (and the scripts that copied them) look for in
// a backend's timeout, and the limit in milliseconds is how torch states its timeouts.
type timeoutError struct {
	after   time.Duration
	waiting string // "waiting for rank 1"
	hint    string // the next step, in parentheses; "" for none
}

func (e *timeoutError) Error() string {
	s := fmt.Sprintf("Timed out after %d ms %s", e.after.Milliseconds(), e.waiting)
	if e.hint != "" {
		s += " (" + e.hint + ")"
	}
	return s
}

// Unwrap returns ErrTimeout, so that errors.Is classifies the error.
func (e *timeoutError) Unwrap() error { return ErrTimeout }

// lostRankError is the error of losing rank to err: for a connection that closed
// (not one that fell silent), it says what that usually means, that the rank's
// process exited or its program closed the group, before how it was seen.
func lostRankError(rank int, err error) error { return &lostRank{rank: rank, err: err} }

// lostRank is lostRankError's error; the rank it names is for attributing a failure
// (see Comm.awaitCause).
type lostRank struct {
	rank int
	err  error
}

func (e *lostRank) Error() string {
	if errors.Is(e.err, ErrPeerClosed) && !errors.Is(e.err, ErrTimeout) {
		return fmt.Sprintf("lost rank %d: it exited or closed its group (%v)", e.rank, e.err)
	}
	return fmt.Sprintf("lost rank %d: %v", e.rank, e.err)
}

func (e *lostRank) Unwrap() error { return e.err }
