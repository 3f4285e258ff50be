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
}

var errBad = errors.New("bad setting")

var parse = Parsers[settings]{Invalid: errBad}

var testParams = []Param[settings]{
	{"GONCCL_CFGTEST_NAME", "anon", "", "a name", parse.Text(func(s *settings, v string) { s.name = v; s.parsed = append(s.parsed, "name") })},
	{"GONCCL_CFGTEST_ON", "0", "", "a switch", parse.ZeroOne(func(s *settings, on bool) { s.on = on; s.parsed = append(s.parsed, "on") })},
	{"GONCCL_CFGTEST_N", "", "(auto)", "a count", parse.Integer(2, 10, func(s *settings, v int64) { s.n = v; s.parsed = append(s.parsed, "n") })},
	{"GONCCL_CFGTEST_ELSEWHERE", "x", "", "read elsewhere", nil},
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
	require.Equal(t, settings{name: "anon", parsed: []string{"name", "on", "n"}, checked: "ok"}, s)
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
		{"GONCCL_CFGTEST_ON", "yes", `bad setting: GONCCL_CFGTEST_ON="yes": expected 0 or 1`, true},
		{"GONCCL_CFGTEST_N", "many", `bad setting: GONCCL_CFGTEST_N="many" is not an integer >= 2`, true},
		{"GONCCL_CFGTEST_N", "1", `bad setting: GONCCL_CFGTEST_N="1" is not an integer >= 2`, true},
		{"GONCCL_CFGTEST_N", "11", `bad setting: GONCCL_CFGTEST_N=11: at most 10`, true},
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
