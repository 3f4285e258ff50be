// Package samegpu is the same-GPU path: collectives among ranks (processes, or
// communicators of one process) whose buffers are all on one GPU. One rank launches one
// kernel that reads every rank's input and writes every rank's output: a rank of its
// own process's buffers as they are, a rank of another process's through that rank's
// exchange buffer (memory that outlives its maker, shared as a file descriptor), into
// and out of which the rank copies on its own stream; the ranks' hosts meet once per
// operation (a shared
// sequence page per rank), and their streams order each other with stream memory
// operations on words of those pages, so a call returns before its GPU work has run.
//
// A stream waits only on words of its own rank's page, so that the rank can release
// it when a peer dies. The package must not choose whether it runs: capi asks it, and
// it answers cuda.ErrNotShared when the ranks are not all on one GPU.
package samegpu
