// Package cuda is the device path: collectives among the ranks of one host whose
// bytes stay on the GPU. Go plans each step and enqueues it on the caller's stream:
// device-to-device copies into and out of a scratch the ranks share (Shared: memory
// that outlives its maker, passed as file descriptors, sharedmem.go), the reduction
// kernels, and the flags that order the ranks (stream
// memory operations on host-mapped flag pages); a watcher on the host (devfault.go)
// turns a dead or wrong peer into an error. Point-to-point (devp2p*.go) and one-sided
// windows (window.go) use the same scratch and flags.
//
// cuda/ is split into packages, each with a doc that says what it is for and what it
// must not do; imports only go down:
//
//	cuda/samegpu    the same-GPU path: ranks on one GPU, ordered by their streams, one kernel
//	cuda            the device path (this package)
//	cuda/staged     the staged path: device buffers through a pinned host pool
//	cuda/kernels    the reduction kernels (sources, fatbin, launches)
//	cuda/topology   the machine: GPUs, NVLink, CUDA_VISIBLE_DEVICES, MPS
//	cuda/driver     the CUDA driver API behind dlopen: contexts, streams, events, copies
//	cuda/cudatest   the fake driver (tests/fakecuda) for Go tests
//
// The device path speaks the driver's types (drivertypes.go names them here). It must not
// stage through host memory (that is cuda/staged) nor call CUDA but through
// cuda/driver; a call returns once its work is enqueued, and nothing waits on the
// host but the watcher.
//
// The package must not assume one rank per device: several communicators (ranks) may
// share a device, each with its own scratch.
package cuda
