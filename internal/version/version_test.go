package version

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// The constants are gonccl.h's, read by the C compiler: this test reads the header
// as text, the way setup.py and the Python package do, and must agree.
func TestVersionIsTheHeaders(t *testing.T) {
	h, err := os.ReadFile("../../capi/gonccl.h")
	require.NoError(t, err)
	part := func(name string) int {
		m := regexp.MustCompile(`#define GONCCL_` + name + `\s+(\d+)`).FindSubmatch(h)
		require.NotNil(t, m, "gonccl.h defines no GONCCL_%s", name)
		v, err := strconv.Atoi(string(m[1]))
		require.NoError(t, err)
		return v
	}
	require.Equal(t, [3]int{part("MAJOR"), part("MINOR"), part("PATCH")}, [3]int{Major, Minor, Patch})
	require.Equal(t, Major*10000+Minor*100+Patch, Code)
	require.Regexp(t, `^\d+\.\d+\.\d+$`, String)
}
