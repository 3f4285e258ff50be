// Package topology reads the machine: the GPUs NVML sees (through its own dlopen
// backend, nvml.go), their NVLink peers and NUMA nodes, which of them
// CUDA_VISIBLE_DEVICES shows, and whether this process is a client of an MPS server.
//
// It describes; it does not choose. Which path an operation takes, and whether ranks
// that share a GPU may wait on it, is decided above (capi's cost model, the device
// path), from what this package reports. It calls no CUDA driver entry point.
package topology
