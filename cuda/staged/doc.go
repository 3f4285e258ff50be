// Package staged is the staged path: device buffers copied through a pinned host pool
// around a host collective, the path that works for every layout of ranks and GPUs.
//
// It must not decide which path an operation takes (capi does, from the cost model),
// talk to the peers itself (the host collective it wraps does), or keep bytes on the
// GPU between operations: what it allocates on the device is scratch for one
// operation's reduction.
//
// The staging contract, for an operation given device buffers and a stream:
//
//	stream: ... earlier work | D2H inputs | (host algorithm) | H2D outputs, event | later work
//
// Stage allocates pinned host buffers (Staging.Host) for the operation's device regions
// when it is issued. When the operation runs, Before enqueues the device->host copies
// on the caller's stream and waits for them (so the operation sees everything queued
// on the stream before it ran); the host algorithm then runs on the pinned buffers;
// After enqueues the host->device copies and records a completion event on the stream
// (so later work on the stream sees the result). The pinned buffers go back to the
// pool and are reused only once that event has completed. WaitOn makes another
// stream wait on the event.
//
// A large operation is pipelined by chunk instead (StageChunked, chunk.go), through
// a ring of W chunks' pinned memory (as many as the staging's limit holds, at least two):
// the first W chunks' device->host copies are queued at once, each chunk with an event;
// one host operation per chunk runs once its event has completed, and its host->device
// copies go at once on the pool's own stream, which waited for the caller's stream's
// earlier work and which the caller's stream waits for at the end; behind them (an event
// on the back stream the caller's stream waits for) go the copies to the host of the
// chunk W later, which reuses the memory:
//
//	stream:      ... earlier work | D2H chunk 0, ev0 | D2H chunk 1, ev1 | wait(rel0) | D2H chunk W, evW | ... | wait(back), event | later work
//	back stream: wait(earlier work) | H2D chunk 0, rel0 | H2D chunk 1, rel1 | ...
//
// StageReduceGPU (reduce.go) is the same for all_reduce, reduce_scatter and
// reduce with the reduction on the GPU: the host only moves each rank's part to it, and
// gonccl's kernels fold the peers' pieces on the back stream.
//
// Stream work stays in issue order: an operation whose owner queues follow-up work on
// the stream after it completes (Hold) keeps the next staging's Before from queueing
// anything until Release. Point-to-point stagings do not run on the executor: a send
// copies in on the issuing thread (CopyIn), a receive copies out when its data is in.
//
// The special stream handles (CU_STREAM_PER_THREAD, and the legacy stream) name
// different streams on different threads or contexts; capi refuses the per-thread one
// for an operation's copies, which run on gonccl's threads, and streams under graph
// capture. A pool retains the primary context it allocates in until Close.
//
// The package must not assume one rank per device: several communicators (ranks) may
// share a device, each with its own pool.
package staged
