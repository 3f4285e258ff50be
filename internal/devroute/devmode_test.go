package devroute

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// GONCCL_DEVICE_PATH's values: samegpu is a mode of its own (ranks all on one GPU take
// the same-GPU path at every size; auto lets the cost model choose), and a value it does
// not know is refused naming the accepted ones.
func TestReadDevMode(t *testing.T) {
	t.Setenv("GONCCL_P2P_DISABLE", "")
	for v, want := range map[string]devMode{"": devAuto, "auto": devAuto, " AUTO ": devAuto, "samegpu": devSameGPU,
		"SameGPU": devSameGPU, "model": devModel, " Model": devModel, "1": devOn, "0": devOff} {
		t.Setenv("GONCCL_DEVICE_PATH", v)
		got, _, err := readDevMode()
		require.NoError(t, err, v)
		require.Equal(t, want, got, v)
	}
	require.True(t, devSameGPU.automatic())
	require.True(t, devAuto.automatic())
	require.True(t, devModel.automatic() && devModel.byModel() && devAuto.byModel() && !devSameGPU.byModel())
	require.False(t, devOn.automatic())
	for _, v := range []string{"same-gpu", "2", "yes", "device"} {
		t.Setenv("GONCCL_DEVICE_PATH", v)
		_, _, err := readDevMode()
		require.ErrorIs(t, err, errUsage, v)
		require.ErrorContains(t, err, `GONCCL_DEVICE_PATH="`+v+`": want auto (the default), model, samegpu, 1 or 0`)
	}
}
