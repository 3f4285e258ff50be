package topology

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/cenv"
)

// MPS: under the CUDA Multi-Process Service the work of its client processes runs in
// one shared context on the server, so clients on one GPU do not take turns on it and a
// stream that waits on the GPU for another client's flag holds nobody back. Then the
// device path's GPU-side waits are cheap even for ranks that share a GPU, and `auto`
// may take it there (ShareUnderMPS). Without MPS they are not (StageWhenDeviceShared).

// NVMLMPSDevice is the optional method of an NVMLDevice that lists the MPS clients
// running on the device (nvmlDeviceGetMPSComputeRunningProcesses): their pids, as the
// machine's first PID namespace numbers them.
type NVMLMPSDevice interface {
	MPSProcesses() ([]int, error)
}

// MPSStatus says whether this process is a client of an MPS server on its GPU, and
// how that was found out.
type MPSStatus struct {
	Client bool
	Why    string
}

// MPSControlPipe returns the path of the MPS control pipe this process would use,
// $CUDA_MPS_PIPE_DIRECTORY/control (/tmp/nvidia-mps/control without it), and whether
// a named pipe is there.
func MPSControlPipe() (string, bool) {
	dir, _ := cenv.Lookup("CUDA_MPS_PIPE_DIRECTORY")
	if strings.TrimSpace(dir) == "" {
		dir = "/tmp/nvidia-mps"
	}
	path := filepath.Join(dir, "control")
	st, err := os.Stat(path)
	return path, err == nil && st.Mode()&os.ModeNamedPipe != 0
}

// DetectMPS says whether process pid is an MPS client on the GPU with PCI bus id bus:
// NVML must list pid among the device's MPS clients. The control pipe (pipe, present
// or not) is the cross-check reported with the answer: a pipe without the listing means
// a daemon this process is not a client of (it started before the daemon, or runs in
// another PID namespace, whose pids NVML does not use), which counts as no MPS. lib is
// initialised and shut down here.
func DetectMPS(lib NVML, bus string, pid int, pipe string, pipeOK bool) MPSStatus {
	pipeState := "absent"
	if pipeOK {
		pipeState = "present"
	}
	no := func(format string, args ...any) MPSStatus {
		return MPSStatus{Why: fmt.Sprintf(format, args...) + fmt.Sprintf("; control pipe %s %s", pipe, pipeState)}
	}
	if err := lib.Init(); err != nil {
		return no("NVML is not available (%v)", err)
	}
	defer lib.Shutdown()
	n, err := lib.DeviceCount()
	if err != nil {
		return no("NVML cannot count the GPUs (%v)", err)
	}
	want := driver.NormalizeBusID(bus)
	for i := range n {
		dev, err := lib.Device(i)
		if err != nil {
			continue
		}
		if b, err := dev.PCIBusID(); err != nil || driver.NormalizeBusID(b) != want {
			continue
		}
		lister, ok := dev.(NVMLMPSDevice)
		if !ok {
			return no("NVML cannot list MPS clients here")
		}
		pids, err := lister.MPSProcesses()
		if err != nil {
			if errors.Is(err, ErrNVMLNotSupported) {
				return no("NVML cannot list MPS clients on GPU %s (%v)", want, err)
			}
			return no("listing MPS clients on GPU %s: %v", want, err)
		}
		if slices.Contains(pids, pid) {
			return MPSStatus{Client: true, Why: fmt.Sprintf("NVML lists pid %d among the %d MPS clients of GPU %s; control pipe %s %s",
				pid, len(pids), want, pipe, pipeState)}
		}
		return no("NVML lists %d MPS clients on GPU %s, and pid %d is not one", len(pids), want, pid)
	}
	return no("NVML sees no GPU %s", want)
}

var localMPS struct {
	mu sync.Mutex
	m  map[string]MPSStatus
}

// LocalMPS is DetectMPS for this process on the GPU with bus id bus, through the
// machine's NVML (libnvidia-ml.so.1), asked once per process and GPU: a process
// becomes a client when it creates its context, and stays one.
func LocalMPS(bus string) MPSStatus {
	localMPS.mu.Lock()
	defer localMPS.mu.Unlock()
	if st, ok := localMPS.m[bus]; ok {
		return st
	}
	pipe, ok := MPSControlPipe()
	st := DetectMPS(newDynamicNVML(), bus, os.Getpid(), pipe, ok)
	if localMPS.m == nil {
		localMPS.m = map[string]MPSStatus{}
	}
	localMPS.m[bus] = st
	return st
}
