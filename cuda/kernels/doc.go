// Package kernels is gonccl's CUDA reduction kernels: the sources here (reduce.cu,
// reduce.cuh, multi.cuh), the fatbin `make kernels` builds from them and this package
// embeds, and the Go side that loads it into a context (Load) and launches one kernel
// per call on a stream: ReduceInto, DivideBy (avg) and ReduceMany (one pass over many
// buffers).
//
// Kernels never synchronise: a launch is queued on the caller's stream and returns;
// they neither wait for nor signal other ranks (ordering is the caller's: the device
// path's flags, staging's events, the same-GPU path's sequence page), and decide
// nothing about which path or algorithm runs.
package kernels
