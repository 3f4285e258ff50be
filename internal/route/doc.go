// Package route chooses the path an operation on CUDA device buffers takes: staged
// through pinned host memory (unpipelined, or pipelined by chunk), the device path
// (ranks map each other's device scratch) or the same-GPU path (ranks on one GPU,
// one launch). It holds the table of which path has passed the GPU check on
// real hardware for which setup (proven.go), the cost model that ranks the paths for
// an operation's kind and size (cost.go), and auto's agreement step, by which every
// rank of a communicator derives the same setup and the same set of paths (agree.go).
//
// It decides; it does not run anything on a GPU. Package devroute runs the path it
// chose (and cuda the algorithm devroute tells it), core runs host algorithms and
// checks arguments, and the C ABI (capi) converts arguments and calls devroute. It
// imports core and cuda's topology, never devroute or capi.
package route

import "errors"

// ErrUsage is a setting that cannot be used as given (the C ABI's invalid-usage
// result).
var ErrUsage = errors.New("invalid usage")
