package devroute

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseScratch(t *testing.T) {
	for v, want := range map[string]int{"8388608": 8 << 20, "64M": 64 << 20, " 1g ": 1 << 30, "2048K": 2 << 20, "16G": 16 << 30} {
		got, err := parseScratch(v)
		require.NoError(t, err, v)
		require.Equal(t, want, got, v)
	}
	for _, v := range []string{"", "abc", "-1", "0", "1000", "17G", "4T", "1.5M", "99999999999999999999"} {
		_, err := parseScratch(v)
		require.ErrorContains(t, err, "GONCCL_DEVICE_SCRATCH", v)
	}
}
