package reduce

import "errors"

// Sentinel errors that every error of this package wraps; core re-exports them as
// core.ErrInvalidArgument and core.ErrNotSupported, so errors.Is matches either name.
var (
	// ErrInvalidArgument: an unknown type or op, a pair that is not defined, or
	// buffers of the wrong length.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrNotSupported: a meaningful pair that gonccl does not reduce (float8).
	ErrNotSupported = errors.New("not supported")
)
