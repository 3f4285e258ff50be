package devroute

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
)

// GONCCL_DEVICE_PATH's values as core parsed them (core's TestDeviceSettings checks
// the parsing): samegpu is a mode of its own (ranks all on one GPU take the same-GPU
// path at every size; auto lets the cost model choose), and GONCCL_P2P_DISABLE=1
// stages whatever the path says.
func TestDevModeOf(t *testing.T) {
	for v, want := range map[string]devMode{"": devAuto, "auto": devAuto, "samegpu": devSameGPU, "model": devModel, "1": devOn, "0": devOff} {
		got, why := devModeOf(core.DeviceSettings{Path: v})
		require.Equal(t, want, got, v)
		require.Equal(t, v == "0", why == "GONCCL_DEVICE_PATH=0", v)
	}
	got, why := devModeOf(core.DeviceSettings{Path: "samegpu", P2PDisable: true})
	require.Equal(t, devOff, got)
	require.Equal(t, "GONCCL_P2P_DISABLE=1", why)
	require.True(t, devSameGPU.automatic())
	require.True(t, devAuto.automatic())
	require.True(t, devModel.automatic() && devModel.byModel() && devAuto.byModel() && !devSameGPU.byModel())
	require.False(t, devOn.automatic())
}
