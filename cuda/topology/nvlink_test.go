package topology

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
)

// HasNVLink: a DGX A100's GPUs have NVLinks (found by CUDA's four-digit bus id); a GPU
// without NVLink support, a GPU NVML does not see and a missing NVML say no.
func TestHasNVLink(t *testing.T) {
	s := dgxA100()
	assert.True(t, HasNVLink(goNVML{s}, "0000:47:00.0"))
	assert.False(t, HasNVLink(goNVML{s}, "0000:01:00.0"))
	wire(s.Devices[2].(*dgxa100.Device), nvmlBus(dgxBus[2]), dgxNUMA[2], nil)
	assert.False(t, HasNVLink(goNVML{s}, "0000:47:00.0"))
	assert.True(t, HasNVLink(goNVML{s}, "0000:07:00.0"))
	assert.False(t, HasNVLink(goNVML{&mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}}, "0000:07:00.0"))
}
