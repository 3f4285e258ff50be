// Package driver is the bottom package of gonccl's device side: the CUDA driver API loaded
// with dlopen (never linked, so libgonccl.so loads and works on machines without
// CUDA), and thin calls on it: contexts, streams, events (inter-process ones too),
// copies, device and pinned memory, IPC handles and stream memory operations.
//
// Every CUDA call runs on a goroutine locked to its OS thread, with the stream's
// context current for the duration of the call (Do) and the thread's previous context
// and capture mode restored afterwards. The lower-case calls of the table are exported
// as they are (MemcpyDtoD, EventRecord, ...): they expect the right context current.
//
// The special stream handles (CU_STREAM_PER_THREAD, and the legacy stream) name
// different streams on different threads or contexts; capi refuses the per-thread one
// for an operation's copies, which run on gonccl's threads, and streams under graph
// capture. Streams gonccl creates for itself (OwnStream) are reused, never destroyed.
//
// The driver package makes no collective decisions and knows no ranks: it does not
// order, chunk, reduce or wait for peers, and imports no other package of cuda. Every
// package above it (topology, kernels, staged, the device path at cuda/, samegpu) calls
// CUDA only through it.
package driver
