package core

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	settings "github.com/gonccl/gonccl/internal/config"
)

var updateReadme = flag.Bool("update", false, "rewrite the README's table of variables from Params")

// The README's table of variables is generated from Params: every parameter gonccl
// reads, with its default and meaning, and nothing that it doesn't.
func TestReadmeVariableTable(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	want := settings.Table(Params)
	got, updated, found := settings.SpliceTable(string(readme), "GONCCL_", want)
	require.True(t, found, "the README has no table of GONCCL_ variables")
	if *updateReadme && got != want {
		require.NoError(t, os.WriteFile("../README.md", []byte(updated), 0o644))
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
