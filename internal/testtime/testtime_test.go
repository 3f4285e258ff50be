package testtime

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestD(t *testing.T) {
	if os.Getenv(EnvVar) != "" {
		require.Equal(t, time.Duration(float64(time.Second)*Scale()), D(time.Second))
		return
	}
	require.Equal(t, 1.0, Scale())
	require.Equal(t, time.Second, D(time.Second))
}

// The factor reaches the tests of a child process, and a bad value fails loudly.
func TestScaleFromEnvironment(t *testing.T) {
	if os.Getenv("TESTTIME_CHILD") == "1" {
		require.Equal(t, 2500*time.Millisecond, D(time.Second))
		return
	}
	for _, c := range []struct {
		value string
		ok    bool
	}{{"2.5", true}, {"0", false}, {"-1", false}, {"x", false}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestScaleFromEnvironment$", "-test.count=1")
		cmd.Env = append(os.Environ(), "TESTTIME_CHILD=1", EnvVar+"="+c.value)
		out, err := cmd.CombinedOutput()
		if c.ok {
			require.NoError(t, err, "%s=%s:\n%s", EnvVar, c.value, out)
		} else {
			require.Error(t, err, "%s=%s:\n%s", EnvVar, c.value, out)
			require.Contains(t, string(out), EnvVar)
		}
	}
}
