// Package cuda is gonccl's device side: the CUDA driver API loaded with dlopen (never
// linked, so libgonccl.so loads and works on machines without CUDA), and the staging
// of device buffers through a pinned host pool around a host collective.
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
// Every CUDA call runs on a goroutine locked to its OS thread, with the stream's
// context current for the duration of the call and the thread's previous context
// restored afterwards.
//
// The package must not assume one rank per device: several communicators (ranks) may
// share a device, each with its own pool.
package cuda
