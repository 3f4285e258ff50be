package core

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's table of variables must list every parameter gonccl reads, with its
// default, and nothing that it doesn't.
func TestReadmeDocumentsEveryParam(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "| `GONCCL_") {
			name := strings.Trim(strings.Split(line, "|")[1], " `")
			documented[name] = true
			for _, p := range Params {
				if p.Name == name && p.Default != "" {
					require.Contains(t, line, "`"+p.Default+"`", "README default for %s", name)
				}
			}
		}
	}
	for _, p := range Params {
		require.True(t, documented[p.Name], "README does not document %s", p.Name)
		delete(documented, p.Name)
	}
	require.Empty(t, documented, "README documents variables gonccl does not read")
}

func TestConfigReadsEnvironmentAtInit(t *testing.T) {
	t.Setenv("GONCCL_CHUNKSIZE", "8192")
	t.Setenv("GONCCL_ALGO", "allreduce:ring,broadcast:chain")
	cfg, err := loadConfig()
	require.NoError(t, err)
	require.Equal(t, 8192, cfg.chunkBytes)
	require.Equal(t, map[string][]string{"allreduce": {"ring"}, "broadcast": {"chain"}}, cfg.algo)
	require.Contains(t, cfg.set, "GONCCL_CHUNKSIZE=8192")

	t.Setenv("GONCCL_ALGO", "allreduce:magic")
	_, err = loadConfig()
	require.ErrorContains(t, err, "allreduce:ring")
	t.Setenv("GONCCL_ALGO", "")
	t.Setenv("GONCCL_TIMEOUT_MS", "soon")
	_, err = loadConfig()
	require.ErrorContains(t, err, "GONCCL_TIMEOUT_MS")
}
