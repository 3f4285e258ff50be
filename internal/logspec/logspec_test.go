package logspec

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseLevel(t *testing.T) {
	for s, want := range map[string]Level{
		"": Warn, "WARN": Warn, "bogus": Warn, "INFO": Info, "info": Info, "VERSION": Info, "TRACE": Trace, "trace": Trace,
	} {
		require.Equal(t, want, ParseLevel(s), "GONCCL_DEBUG=%q", s)
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
		enabled := Subsystems(c.spec)
		for _, s := range c.on {
			require.True(t, enabled(s), "GONCCL_DEBUG_SUBSYS=%q must log %s", c.spec, s)
		}
		for _, s := range c.off {
			require.False(t, enabled(s), "GONCCL_DEBUG_SUBSYS=%q must not log %s", c.spec, s)
		}
	}
}
