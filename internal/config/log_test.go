package config

import (
	"io"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// GONCCL_DEBUG_FILE's patterns are NCCL_DEBUG_FILE's: %h the host, %p the pid.
func TestDebugFile(t *testing.T) {
	require.Equal(t, "/tmp/g.node1.42.log", DebugFile("/tmp/g.%h.%p.log", "node1", 42))
	require.Equal(t, "100%.log", DebugFile("100%%.log", "h", 1))
	require.Equal(t, "plain", DebugFile("plain", "h", 1))
	require.NoError(t, CheckDebugFile("/tmp/g.%h.%p.%%.log"))
	require.EqualError(t, CheckDebugFile("/tmp/%r.log"), "%r is not a pattern")
	require.EqualError(t, CheckDebugFile("/tmp/x%"), "% is not a pattern")
}

func TestCheckSubsystems(t *testing.T) {
	for _, ok := range []string{"", "ALL", "init,net", "^COLL", " tuning , env "} {
		_, good := CheckSubsystems(ok)
		require.True(t, good, ok)
	}
	bad, good := CheckSubsystems("INIT,NETWORK")
	require.False(t, good)
	require.Equal(t, "NETWORK", bad)
}

// With GONCCL_DEBUG_FILE set, the lines go to that file (one per process, appended),
// and nothing to stderr; a file that cannot be opened is named on stderr.
func TestLoggersFile(t *testing.T) {
	dir := t.TempDir()
	pattern := dir + "/log.%h.%p"
	out := stderrOf(t, func() {
		for i := 0; i < 2; i++ { // two communicators of one process share the file
			logs := Loggers(Logging{Level: "info", File: pattern}, Who{Host: "h", Pid: 9, Rank: i}, nil)
			logs("INIT").Info("joined")
		}
	})
	require.Empty(t, out)
	data, err := os.ReadFile(dir + "/log.h.9")
	require.NoError(t, err)
	require.Regexp(t, `(?s)^\S+ h:9:\d+ \[0\] GONCCL INFO INIT joined\n\S+ h:9:\d+ \[1\] GONCCL INFO INIT joined\n$`, string(data))

	out = stderrOf(t, func() {
		Loggers(Logging{Level: "warn", File: dir + "/no/such/dir/log"}, Who{Host: "h", Pid: 9, Rank: 0}, nil)("NET").Warn("still seen")
	})
	require.Contains(t, out, `GONCCL_DEBUG_FILE="`+dir+`/no/such/dir/log": open `)
	require.Contains(t, out, "logging to stderr instead")
	require.Contains(t, out, "GONCCL WARN NET still seen")

	// a second communicator (or package) of the process does not say it again
	out = stderrOf(t, func() {
		Loggers(Logging{Level: "warn", File: dir + "/no/such/dir/log"}, Who{Host: "h", Pid: 9, Rank: 1}, nil)
	})
	require.Empty(t, out)
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

// Loggers writes one line per event, "TIME host:pid:tid [rank] GONCCL LEVEL SUBSYSTEM
// message" (the format core's and cuda's lines share, NCCL's with a timestamp), at the
// level GONCCL_DEBUG asks for, for the subsystems GONCCL_DEBUG_SUBSYS lets through.
func TestLoggers(t *testing.T) {
	// lines replaces each line's timestamp and thread id with T and TID.
	lines := func(out string) string {
		re := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z (\S+):(\d+):\d+ `)
		return re.ReplaceAllString(out, "T $1:$2:TID ")
	}
	out := stderrOf(t, func() {
		logs := Loggers(Logging{Level: "info", Subsys: "INIT,NET"}, Who{Host: "host", Pid: 7, Rank: 0}, nil)
		logs("INIT").Info("version 1.2.3")
		logs("NET").Debug("not at INFO")
		logs("COLL").Warn("COLL is excluded")
		logs("NET").Warn("a warning")
	})
	require.Equal(t, "T host:7:TID [0] GONCCL INFO INIT version 1.2.3\nT host:7:TID [0] GONCCL WARN NET a warning\n", lines(out))

	out = stderrOf(t, func() {
		logs := Loggers(Logging{}, Who{Host: "host", Pid: 7, Rank: -1}, nil)
		logs("INIT").Info("not at the default WARN")
		logs("ENV").Error("failed")
	})
	require.Equal(t, "T host:7:TID GONCCL ERROR ENV failed\n", lines(out))

	out = stderrOf(t, func() {
		Loggers(Logging{Level: "TRACE", Subsys: "COLL"}, Who{Host: "h", Pid: 1, Rank: 3}, nil)("COLL").Debug("one op",
			zap.Duration("took", 202720*time.Nanosecond))
	})
	// GONCCL_DEBUG=TRACE's lines say TRACE, and a duration has its unit
	require.Equal(t, "T h:1:TID [3] GONCCL TRACE COLL one op {\"took\": \"202.72µs\"}\n", lines(out))
	require.Regexp(t, `^\d{4}-.*Z h:1:\d+ \[3\]`, out, "a timestamp and the thread id lead the line")
}

// A tee receives every entry of the subsystems that log, as well as stderr.
func TestLoggersTee(t *testing.T) {
	obs, entries := observer.New(zapcore.InfoLevel)
	_ = stderrOf(t, func() {
		logs := Loggers(Logging{Level: "INFO", Subsys: "^SHM"}, Who{Host: "h", Pid: 1, Rank: 0}, obs)
		logs("INIT").Info("to both")
		logs("SHM").Info("excluded")
	})
	require.Equal(t, 1, entries.Len())
	require.Equal(t, "to both", entries.All()[0].Message)
	require.Equal(t, "INIT", entries.All()[0].LoggerName)
}
