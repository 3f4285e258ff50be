package main

import (
	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/topology"
)

// Each rank logs its GPUs at INIT (GONCCL_DEBUG=INFO), read with NVML through
// package cuda's dlopen backend: core cannot import cuda, so it takes the reader here.
func init() {
	core.DeviceTopology = topology.TopologyLines
}
