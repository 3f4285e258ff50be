package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

var knownNames = []string{"GONCCL_TIMEOUT_MS", "GONCCL_HEARTBEAT_TIMEOUT_MS", "GONCCL_DEBUG", "GONCCL_DEBUG_FILE", "GONCCL_ALGO"}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		d    int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"abc", "abc", 0},
		{"abc", "abd", 1}, {"abc", "acb", 1}, {"kitten", "sitting", 3}, {"ab", "ba", 1},
	} {
		require.Equal(t, c.d, editDistance(c.a, c.b), "%q %q", c.a, c.b)
		require.Equal(t, c.d, editDistance(c.b, c.a), "%q %q", c.b, c.a)
	}
}

func TestClosest(t *testing.T) {
	for name, want := range map[string]string{
		"GONCCL_TIMOUT_MS":   "GONCCL_TIMEOUT_MS", // a letter left out
		"GONCCL_TIEMOUT_MS":  "GONCCL_TIMEOUT_MS", // two swapped
		"GONCCL_DEBUG_FILES": "GONCCL_DEBUG_FILE",
		"GONCCL_debug":       "GONCCL_DEBUG", // case
		"GONCCL_ALOG":        "GONCCL_ALGO",
		"GONCCL_SOMETHING":   "", // nothing near
		"GONCCL_X":           "",
	} {
		require.Equal(t, want, Closest(name, knownNames), name)
	}
}

func TestUnknownNames(t *testing.T) {
	got := unknownOf([]string{"GONCCL_TIMOUT_MS", "GONCCL_DEBUG", "GONCCL_TOOL_X", "GONCCL_NOTHING_LIKE_IT"},
		knownNames, []string{"GONCCL_TOOL_"})
	require.Equal(t, []Unknown{{Name: "GONCCL_NOTHING_LIKE_IT"}, {Name: "GONCCL_TIMOUT_MS", Closest: "GONCCL_TIMEOUT_MS"}}, got)
	require.Equal(t, "GONCCL_TIMOUT_MS is not a setting gonccl knows (did you mean GONCCL_TIMEOUT_MS?)", got[1].Hint())
	require.Equal(t, "GONCCL_NOTHING_LIKE_IT is not a setting gonccl knows", got[0].Hint())

	t.Setenv("GONCCL_CFGTEST_UNKNWN", "1")
	require.Equal(t, []Unknown{{Name: "GONCCL_CFGTEST_UNKNWN"}}, UnknownNames("GONCCL_CFGTEST_", nil, nil))
}
