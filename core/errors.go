package core

import (
	"errors"
	"fmt"

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
