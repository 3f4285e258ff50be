package core

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var updateReadme = flag.Bool("update", false, "rewrite the README's table of variables from Params")

// variableTable is the README's table of variables, one row per Param.
func variableTable() string {
	var b strings.Builder
	for _, p := range Params {
		def := "`" + p.Default + "`"
		if p.Default == "" {
			def = p.Unset
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p.Name, def, p.Help)
	}
	return b.String()
}

// The README's table of variables is generated from Params: every parameter gonccl
// reads, with its default and meaning, and nothing that it doesn't.
func TestReadmeVariableTable(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	lines := strings.SplitAfter(string(readme), "\n")
	first, last := -1, -1
	for i, line := range lines {
		if strings.HasPrefix(line, "| `GONCCL_") {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	require.GreaterOrEqual(t, first, 0, "the README has no table of GONCCL_ variables")
	got := strings.Join(lines[first:last+1], "")
	want := variableTable()
	if *updateReadme && got != want {
		out := strings.Join(lines[:first], "") + want + strings.Join(lines[last+1:], "")
		require.NoError(t, os.WriteFile("../README.md", []byte(out), 0o644))
		return
	}
	for _, p := range Params {
		require.True(t, p.Default != "" || p.Unset != "", "%s has neither a default nor a word for unset", p.Name)
	}
	require.Equal(t, want, got, "the README's table of variables differs from core.Params, its source: "+
		"edit Params, then run go test ./core -run TestReadmeVariableTable -update")
}

func TestConfigReadsEnvironmentAtInit(t *testing.T) {
	t.Setenv("GONCCL_CHUNKSIZE", "8192")
	t.Setenv("GONCCL_ALGO", "allreduce:ring,broadcast:chain")
	cfg, err := loadConfig()
	require.NoError(t, err)
	require.Equal(t, 8192, cfg.chunkBytes)
	require.Equal(t, algoAllow{KindAllReduce: {AlgoRing}, KindBroadcast: {AlgoChain}}, cfg.algo)
	require.Contains(t, cfg.set, "GONCCL_CHUNKSIZE=8192")

	t.Setenv("GONCCL_ALGO", "allreduce:magic")
	_, err = loadConfig()
	require.ErrorContains(t, err, "allreduce:ring")
	t.Setenv("GONCCL_ALGO", "")
	t.Setenv("GONCCL_TIMEOUT_MS", "soon")
	_, err = loadConfig()
	require.ErrorContains(t, err, "GONCCL_TIMEOUT_MS")
}
