package topology

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSharedGPUs(t *testing.T) {
	require.Empty(t, SharedGPUs([]string{"a", "b", ""}))
	require.Equal(t, []SharedGPU{{Bus: "b", Ranks: []int{1, 3}}, {Bus: "a", Ranks: []int{2, 4}}},
		SharedGPUs([]string{"c", "b", "a", "b", "a", "", ""}))
}
