package topology

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// DetectMPS against go-nvml's DGX A100 mock, whose GPU 2 lists MPS clients: this
// process is a client when NVML lists its pid on its GPU, and only then; the control
// pipe is reported beside the answer.
func TestDetectMPS(t *testing.T) {
	s := dgxA100()
	clients := []nvml.ProcessInfo{{Pid: 4242}, {Pid: 777}}
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
			if i == 2 {
				return clients, nvml.SUCCESS
			}
			return nil, nvml.SUCCESS
		}
	}
	bus := "0000:47:00.0" // GPU 2, as CUDA names it (four-digit domain)

	st := DetectMPS(goNVML{s}, bus, 777, "/tmp/mps/control", true)
	assert.True(t, st.Client, st.Why)
	assert.Equal(t, "NVML lists pid 777 among the 2 MPS clients of GPU 0000:47:00.0; control pipe /tmp/mps/control present", st.Why)

	st = DetectMPS(goNVML{s}, bus, 778, "/tmp/mps/control", true)
	assert.False(t, st.Client)
	assert.Equal(t, "NVML lists 2 MPS clients on GPU 0000:47:00.0, and pid 778 is not one; control pipe /tmp/mps/control present", st.Why)

	st = DetectMPS(goNVML{s}, "0000:07:00.0", 777, "/tmp/nvidia-mps/control", false)
	assert.False(t, st.Client, "777 is a client of GPU 2, not of GPU 0")
	assert.Contains(t, st.Why, "NVML lists 0 MPS clients on GPU 0000:07:00.0")
	assert.Contains(t, st.Why, "control pipe /tmp/nvidia-mps/control absent")

	st = DetectMPS(goNVML{s}, "0000:99:00.0", 777, "p", false)
	assert.False(t, st.Client)
	assert.Contains(t, st.Why, "NVML sees no GPU 0000:99:00.0")
	assert.Len(t, s.ShutdownCalls(), len(s.InitCalls()), "every Init is shut down again")

	s.Devices[2].(*dgxa100.Device).GetMPSComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	st = DetectMPS(goNVML{s}, bus, 777, "p", true)
	assert.False(t, st.Client)
	assert.Contains(t, st.Why, "NVML cannot list MPS clients on GPU 0000:47:00.0")

	st = DetectMPS(goNVML{&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}}, bus, 777, "p", true)
	assert.False(t, st.Client)
	assert.Contains(t, st.Why, "NVML is not available")
}

// MPSControlPipe finds a named pipe at $CUDA_MPS_PIPE_DIRECTORY/control, and nothing
// where the directory has none (or a plain file).
func TestMPSControlPipe(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", dir)
	path, ok := MPSControlPipe()
	assert.Equal(t, filepath.Join(dir, "control"), path)
	assert.False(t, ok)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	_, ok = MPSControlPipe()
	assert.False(t, ok, "a plain file is not the daemon's pipe")
	require.NoError(t, os.Remove(path))
	require.NoError(t, syscall.Mkfifo(path, 0o600))
	_, ok = MPSControlPipe()
	assert.True(t, ok)
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", "")
	path, _ = MPSControlPipe()
	assert.Equal(t, "/tmp/nvidia-mps/control", path)
}
