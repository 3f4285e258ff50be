package topology

import (
	"sync"

	"github.com/gonccl/gonccl/cuda/driver"
)

var localNVLink struct {
	mu sync.Mutex
	m  map[string]bool
}

// LocalNVLink reports whether the GPU with bus id bus has an active NVLink, through
// the machine's NVML, asked once per process and GPU; false where NVML cannot say.
func LocalNVLink(bus string) bool {
	localNVLink.mu.Lock()
	defer localNVLink.mu.Unlock()
	want := driver.NormalizeBusID(bus)
	if on, ok := localNVLink.m[want]; ok {
		return on
	}
	if localNVLink.m == nil {
		localNVLink.m = map[string]bool{}
	}
	localNVLink.m[want] = HasNVLink(newDynamicNVML(), want)
	return localNVLink.m[want]
}

// HasNVLink reports whether lib shows the GPU with bus id bus with an active NVLink.
func HasNVLink(lib NVML, bus string) bool {
	if err := lib.Init(); err != nil {
		return false
	}
	defer func() { _ = lib.Shutdown() }()
	gpus, err := Topology(lib)
	if err != nil {
		return false
	}
	want := driver.NormalizeBusID(bus)
	for _, g := range gpus {
		if g.BusID == want {
			return g.NVLinks > 0
		}
	}
	return false
}
