// Package core is gonccl's collective engine: the communicator and its bootstrap, the
// per-communicator executor that runs operations in issue order, and the algorithms
// (ring, recursive doubling, binomial tree, chain, dissemination). The data types and
// the reductions live in internal/reduce; core re-exports them (datatype.go).
//
// Every collective is a row of one table (colltable.go): its names, its algorithms with
// their cost estimates (tuning.go) and its run function (dispatch.go). Dispatch, the
// algorithm choice, GONCCL_ALGO (algoparse.go), the logs and the flight recorder read it.
//
// Algorithms are schedules of send, receive and reduce steps over transport.Link; they
// never open a socket, so tests drive them over in-memory links. Buffers are the
// caller's memory (a tensor's storage, a C pointer): core reads and writes them in place
// and never copies bulk data onto the Go heap.
//
// core must not use cgo (the reduction kernels are internal/reduce's), and must not log
// from the hot path except at TRACE.
package core
