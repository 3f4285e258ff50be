package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// settings is what the test registry fills.
type settings struct {
	name    string
	on      bool
	n       int64
	parsed  []string // the parameters parsed, in order
	checked string   // the custom parser's value
	level   string
}

var errBad = errors.New("bad setting")

var parse = Parsers[settings]{Invalid: errBad}

var testParams = []Param[settings]{
	{"GONCCL_CFGTEST_NAME", "anon", "", "a name", parse.Text(func(s *settings, v string) { s.name = v; s.parsed = append(s.parsed, "name") })},
	{"GONCCL_CFGTEST_ON", "0", "", "a switch", parse.ZeroOne(func(s *settings, on bool) { s.on = on; s.parsed = append(s.parsed, "on") })},
	{"GONCCL_CFGTEST_N", "", "(auto)", "a count", parse.Integer(2, 10, func(s *settings, v int64) { s.n = v; s.parsed = append(s.parsed, "n") })},
	{"GONCCL_CFGTEST_ELSEWHERE", "x", "", "read elsewhere", nil},
	{"GONCCL_CFGTEST_LEVEL", "warn", "", "a level", parse.OneOf([]string{"WARN", "INFO", "TRACE"}, func(s *settings, v string) { s.level = v })},
	{"GONCCL_CFGTEST_SIZE", "8M", "", "a size, checked only", parse.Bytes(1<<20, 16<<30, nil)},
	{"GONCCL_CFGTEST_CUSTOM", "ok", "", "custom", func(s *settings, name, v string) error {
		if v == "no" {
			return errors.New(name + " refused")
		}
		s.checked = v
		return nil
	}},
}

func TestLoadDefaults(t *testing.T) {
	var s settings
	set, err := Load(testParams, &s)
	require.NoError(t, err)
	require.Empty(t, set)
	require.Equal(t, settings{name: "anon", parsed: []string{"name", "on", "n"}, checked: "ok", level: "WARN"}, s)
}

func TestLoadReadsEnvironment(t *testing.T) {
	t.Setenv("GONCCL_CFGTEST_N", "7")
	t.Setenv("GONCCL_CFGTEST_ON", "1")
	t.Setenv("GONCCL_CFGTEST_NAME", "") // empty counts as unset: the default
	t.Setenv("GONCCL_CFGTEST_ELSEWHERE", "y")
	var s settings
	set, err := Load(testParams, &s)
	require.NoError(t, err)
	require.Equal(t, []string{"GONCCL_CFGTEST_ON=1", "GONCCL_CFGTEST_N=7", "GONCCL_CFGTEST_ELSEWHERE=y"}, set)
	require.Equal(t, "anon", s.name)
	require.True(t, s.on)
	require.Equal(t, int64(7), s.n)
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, value, msg string
		sentinel         bool // the error wraps Parsers.Invalid
	}{
		{"GONCCL_CFGTEST_ON", "yes", `GONCCL_CFGTEST_ON="yes" is not a valid setting: it takes 0 or 1; unset it for the default`, true},
		{"GONCCL_CFGTEST_N", "many", `GONCCL_CFGTEST_N="many" is not a valid setting: it takes an integer from 2 to 10; unset it for the default`, true},
		{"GONCCL_CFGTEST_N", "1", `GONCCL_CFGTEST_N="1" is not a valid setting: it takes an integer from 2 to 10; unset it for the default`, true},
		{"GONCCL_CFGTEST_N", "11", `GONCCL_CFGTEST_N="11" is not a valid setting: it takes an integer from 2 to 10; unset it for the default`, true},
		{"GONCCL_CFGTEST_LEVEL", "bogus", `GONCCL_CFGTEST_LEVEL="bogus" is not a valid setting: it takes WARN, INFO or TRACE, in any case; unset it for the default`, true},
		{"GONCCL_CFGTEST_SIZE", "3X", `GONCCL_CFGTEST_SIZE="3X" is not a valid setting: it takes bytes from 1M to 16G (e.g. 4194304 or 4M; K, M, G suffixes); unset it for the default`, true},
		{"GONCCL_CFGTEST_SIZE", "1023K", `GONCCL_CFGTEST_SIZE="1023K" is not a valid setting: it takes bytes from 1M to 16G (e.g. 4194304 or 4M; K, M, G suffixes); unset it for the default`, true},
		{"GONCCL_CFGTEST_CUSTOM", "no", "GONCCL_CFGTEST_CUSTOM refused", false},
	}
	for _, c := range cases {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			_, err := Load(testParams, &settings{})
			require.EqualError(t, err, c.msg)
			require.Equal(t, c.sentinel, errors.Is(err, errBad))
		})
	}
}

// An integer with no upper bound (most 0) takes any value from least up.
func TestIntegerUnbounded(t *testing.T) {
	var got int64
	p := Parsers[settings]{Invalid: errBad}.Integer(0, 0, func(_ *settings, v int64) { got = v })
	require.NoError(t, p(nil, "X", "9223372036854775807"))
	require.Equal(t, int64(1<<63-1), got)
	require.ErrorIs(t, p(nil, "X", "-1"), errBad)
}

func TestEcho(t *testing.T) {
	obs, entries := observer.New(zapcore.InfoLevel)
	Echo(zap.New(obs), []string{"GONCCL_A=1", "chunk size (communicator option) 8192"})
	require.Equal(t, 2, entries.Len())
	require.Equal(t, "GONCCL_A=1", entries.All()[0].Message)
	require.Equal(t, "chunk size (communicator option) 8192", entries.All()[1].Message)
}
