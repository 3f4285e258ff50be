// Package samegpu is the same-GPU path: collectives among ranks (processes, or
// communicators of one process) whose buffers are all on one GPU. The ranks order
// themselves on the host (a shared sequence page per rank, its stream word written by
// the rank's stream and read by the peers' hosts, polled),
// never with GPU-side waits between contexts that time-slice the GPU; then one rank
// launches one kernel that reads every rank's input and writes every rank's output
// through IPC mappings of the callers' buffers.
//
// It must not make GPU streams of one context wait for another context's flags (the
// device path at cuda/ does that, where contexts do not time-slice), nor choose
// whether it runs: capi asks it, and it answers cuda.ErrNotShared when the ranks are
// not all on one GPU.
package samegpu
