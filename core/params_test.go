package core

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	settings "github.com/gonccl/gonccl/internal/config"
)

var updateDoc = flag.Bool("update", false, "rewrite docs/environment.md's tables of variables from Params")

// docs/environment.md's tables of variables are generated from Params (and
// outsideParams): every variable gonccl reads, with its default and meaning, grouped,
// and nothing that it doesn't.
func TestEnvironmentDoc(t *testing.T) {
	const path = "../docs/environment.md"
	doc, err := os.ReadFile(path)
	require.NoError(t, err)
	want := EnvironmentDoc()
	got, updated, found := spliceEnvDoc(string(doc), want)
	require.True(t, found, "%s lacks the markers of its generated tables: %q and %q", path, envDocBegin, envDocEnd)
	if *updateDoc && got != want {
		require.NoError(t, os.WriteFile(path, []byte(updated), 0o644))
		return
	}
	for _, p := range append(append([]settings.Param[config]{}, Params...), outsideParams...) {
		require.True(t, p.Default != "" || p.Unset != "", "%s has neither a default nor a word for unset", p.Name)
		require.NotRegexp(t, `(?i)issue \d`, p.Help, "%s: user text names no tracker issue", p.Name)
	}
	require.Equal(t, want, got, path+"'s tables of variables differ from core.Params, their source: "+
		"edit Params, then run go test ./core -run TestEnvironmentDoc -update")
}

// Every group of the page gets its variables by name or prefix; test-only ones apart.
func TestEnvGroupOf(t *testing.T) {
	for name, want := range map[string]string{
		"GONCCL_DEBUG": "debug", "GONCCL_TRACE_DUMP_DIR": "debug", "GONCCL_SOCKET_IFNAME": "network",
		"GONCCL_DEVICE_PATH": "gpu", "GONCCL_HEARTBEAT_TIMEOUT_MS": "fault", "GONCCL_LIBRARY": "build",
		"GONCCL_TEST_INJECT_PANIC": "test", "GONCCL_ALGO": "tuning",
	} {
		require.Equal(t, want, envGroupOf(name), name)
	}
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
