package config

import (
	"io"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

func TestParseLevel(t *testing.T) {
	for s, want := range map[string]level{
		"": levelWarn, "WARN": levelWarn, "bogus": levelWarn, "INFO": levelInfo, "info": levelInfo, "VERSION": levelInfo, "TRACE": levelTrace, "trace": levelTrace,
	} {
		require.Equal(t, want, parseLevel(s), "GONCCL_DEBUG=%q", s)
	}
}

func TestSubsystems(t *testing.T) {
	cases := []struct {
		spec    string
		on, off []string
	}{
		{"", []string{"INIT", "COLL"}, nil},
		{"ALL", []string{"INIT", "NET"}, nil},
		{"INIT,NET", []string{"INIT", "NET"}, []string{"COLL"}},
		{"init, net", []string{"INIT", "NET"}, []string{"COLL"}},
		{"^COLL", []string{"INIT", "NET"}, []string{"COLL"}},
		{"^ALL", nil, []string{"INIT", "COLL"}},
	}
	for _, c := range cases {
		enabled := subsystems(c.spec)
		for _, s := range c.on {
			require.True(t, enabled(s), "GONCCL_DEBUG_SUBSYS=%q must log %s", c.spec, s)
		}
		for _, s := range c.off {
			require.False(t, enabled(s), "GONCCL_DEBUG_SUBSYS=%q must not log %s", c.spec, s)
		}
	}
}

// stderrOf runs f with os.Stderr sent to a pipe and returns what f wrote there.
func stderrOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	saved := os.Stderr
	os.Stderr = w
	defer func() { os.Stderr = saved }()
	f()
	require.NoError(t, w.Close())
	out, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	return string(out)
}

// Loggers writes one line per event, "LEVEL name.SUBSYSTEM message" (the format core's
// and cuda's INIT lines share), at the level GONCCL_DEBUG asks for, for the
// subsystems GONCCL_DEBUG_SUBSYS lets through.
func TestLoggers(t *testing.T) {
	out := stderrOf(t, func() {
		logs := Loggers("info", "INIT,NET", "host:7 [0] GONCCL", nil)
		logs("INIT").Info("version 1.2.3")
		logs("NET").Debug("not at INFO")
		logs("COLL").Warn("COLL is excluded")
		logs("NET").Warn("a warning")
	})
	require.Equal(t, "INFO host:7 [0] GONCCL.INIT version 1.2.3\nWARN host:7 [0] GONCCL.NET a warning\n", out)

	out = stderrOf(t, func() {
		logs := Loggers("", "", "host:7 GONCCL", nil)
		logs("INIT").Info("not at the default WARN")
		logs("ENV").Error("failed")
	})
	require.Equal(t, "ERROR host:7 GONCCL.ENV failed\n", out)

	out = stderrOf(t, func() { Loggers("TRACE", "COLL", "h:1 GONCCL", nil)("COLL").Debug("one op") })
	require.Equal(t, "DEBUG h:1 GONCCL.COLL one op\n", out)
}

// A tee receives every entry of the subsystems that log, as well as stderr.
func TestLoggersTee(t *testing.T) {
	obs, entries := observer.New(zapcore.InfoLevel)
	_ = stderrOf(t, func() {
		logs := Loggers("INFO", "^SHM", "h:1 GONCCL", obs)
		logs("INIT").Info("to both")
		logs("SHM").Info("excluded")
	})
	require.Equal(t, 1, entries.Len())
	require.Equal(t, "to both", entries.All()[0].Message)
	require.Equal(t, "h:1 GONCCL.INIT", entries.All()[0].LoggerName)
}
