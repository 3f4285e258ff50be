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

// Every setting is checked when a communicator is created (or its unique id made):
// no row goes unparsed, so no value is accepted silently, those the C ABI reads for
// device buffers included.
func TestEveryParamChecked(t *testing.T) {
	for _, p := range Params {
		require.NotNil(t, p.Parse, "%s has no parser: a bad value would be accepted silently", p.Name)
	}
}

// A bad value fails loadConfig with one message naming the variable, the value and
// what it takes.
func TestConfigRefusesBadValues(t *testing.T) {
	cases := []struct{ name, value, want string }{
		{"GONCCL_DEBUG", "bogus", `GONCCL_DEBUG="bogus" is not a valid setting: it takes WARN, INFO or TRACE`},
		{"GONCCL_DEBUG", "VERSION", `GONCCL_DEBUG="VERSION" is not a valid setting`},
		{"GONCCL_DEBUG_SUBSYS", "INIT,NETWORK", `GONCCL_DEBUG_SUBSYS="INIT,NETWORK" is not a valid setting: it takes names of INIT, COLL, NET, SHM, ENV, TUNING or ALL`},
		{"GONCCL_DEBUG_FILE", "/tmp/x.%r", `GONCCL_DEBUG_FILE="/tmp/x.%r" is not a valid setting`},
		{"GONCCL_DEVICE_PATH", "bogus", `GONCCL_DEVICE_PATH="bogus" is not a valid setting: it takes auto, model, samegpu, 1 or 0`},
		{"GONCCL_P2P_DISABLE", "yes", `GONCCL_P2P_DISABLE="yes" is not a valid setting: it takes 0 or 1`},
		{"GONCCL_DEVICE_SCRATCH", "1K", `GONCCL_DEVICE_SCRATCH="1K" is not a valid setting: it takes bytes from 1M to 16G`},
		{"GONCCL_DEVICE_RING_THRESHOLD", "big", `GONCCL_DEVICE_RING_THRESHOLD="big" is not a valid setting`},
		{"GONCCL_STAGED_CHUNK", "17G", `GONCCL_STAGED_CHUNK="17G" is not a valid setting: it takes bytes from 0 to 16G`},
		{"GONCCL_STAGED_PINNED", "-1", `GONCCL_STAGED_PINNED="-1" is not a valid setting`},
		{"GONCCL_STAGED_REDUCE", "tpu", `GONCCL_STAGED_REDUCE="tpu" is not a valid setting: it takes gpu or cpu`},
		{"GONCCL_DEVICE_PATH_COST", "staged.latency", `GONCCL_DEVICE_PATH_COST="staged.latency" is not a valid setting: it takes key=value pairs`},
		{"GONCCL_TIMEOUT_MS", "0", `GONCCL_TIMEOUT_MS="0" is not a valid setting: it takes an integer of at least 1`},
		{"GONCCL_PORT_RANGE", "29500", `GONCCL_PORT_RANGE="29500" is not a valid setting: it takes two port numbers lo-hi`},
		{"GONCCL_PORT_RANGE", "29600-29500", `GONCCL_PORT_RANGE="29600-29500" is not a valid setting`},
		{"GONCCL_PORT_RANGE", "0-10", `GONCCL_PORT_RANGE="0-10" is not a valid setting`},
		{"GONCCL_PORT_RANGE", "60000-70000", `GONCCL_PORT_RANGE="60000-70000" is not a valid setting`},
	}
	for _, c := range cases {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			t.Setenv(c.name, c.value)
			_, err := loadConfig()
			require.ErrorIs(t, err, ErrInvalidArgument)
			require.ErrorContains(t, err, c.want)
		})
	}
	for name, value := range map[string]string{"GONCCL_DEBUG": "info", "GONCCL_DEVICE_PATH": "SameGPU", "GONCCL_STAGED_CHUNK": "4m",
		"GONCCL_DEVICE_PATH_COST": "staged.latency=300, samegpu.busbw=400", "GONCCL_DEBUG_SUBSYS": "^coll", "GONCCL_PORT_RANGE": " 29500 - 29507 "} {
		t.Setenv(name, value)
	}
	_, err := loadConfig()
	require.NoError(t, err)
}

// The settings of the paths for device buffers are parsed here, once, into
// DeviceSettings (package devroute reads them there): defaults, suffixes, any case,
// and whether GONCCL_STAGED_CHUNK was set at all.
func TestDeviceSettings(t *testing.T) {
	for _, name := range []string{"GONCCL_DEVICE_PATH", "GONCCL_P2P_DISABLE", "GONCCL_DEVICE_SCRATCH", "GONCCL_DEVICE_RING_THRESHOLD",
		"GONCCL_STAGED_CHUNK", "GONCCL_STAGED_PINNED", "GONCCL_STAGED_REDUCE", "GONCCL_DEVICE_PATH_COST"} {
		t.Setenv(name, "")
	}
	cfg, err := loadConfig()
	require.NoError(t, err)
	require.Equal(t, DeviceSettings{Path: "auto", Scratch: 8 << 20, RingThreshold: 4 << 20, StagedPinned: 64 << 20, StagedReduce: "gpu"}, cfg.device)
	for name, value := range map[string]string{"GONCCL_DEVICE_PATH": " SameGPU ", "GONCCL_P2P_DISABLE": "1", "GONCCL_DEVICE_SCRATCH": "64m",
		"GONCCL_DEVICE_RING_THRESHOLD": "0", "GONCCL_STAGED_CHUNK": "0", "GONCCL_STAGED_PINNED": " 2G ", "GONCCL_STAGED_REDUCE": "CPU"} {
		t.Setenv(name, value)
	}
	cfg, err = loadConfig()
	require.NoError(t, err)
	require.Equal(t, DeviceSettings{Path: "samegpu", P2PDisable: true, Scratch: 64 << 20, StagedChunkSet: true, StagedPinned: 2 << 30, StagedReduce: "cpu"}, cfg.device)
	t.Setenv("GONCCL_STAGED_CHUNK", "1m")
	cfg, err = loadConfig()
	require.NoError(t, err)
	require.Equal(t, 1<<20, cfg.device.StagedChunk)
	require.True(t, cfg.device.StagedChunkSet)
}

// GONCCL_TLS=1 without its files names all three at once, and what each is.
func TestConfigTLSNamesEveryMissingFile(t *testing.T) {
	t.Setenv("GONCCL_TLS", "1")
	_, err := loadConfig()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "not set: GONCCL_TLS_CERT, GONCCL_TLS_KEY and GONCCL_TLS_CA")
	t.Setenv("GONCCL_TLS_CERT", "c.pem")
	_, err = loadConfig()
	require.ErrorContains(t, err, "not set: GONCCL_TLS_KEY and GONCCL_TLS_CA")
	require.NotContains(t, err.Error(), "GONCCL_TLS=1: GONCCL_TLS=1")
}

// A GONCCL_SOCKET_IFNAME that matches nothing is refused with the interfaces there are.
func TestSocketIfnameListsInterfaces(t *testing.T) {
	t.Setenv("GONCCL_SOCKET_IFNAME", "=nosuchif0")
	_, err := NewUniqueID()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, `GONCCL_SOCKET_IFNAME="=nosuchif0"`)
	require.ErrorContains(t, err, "lo (127.0.0.1)")
}

// A GONCCL_* variable that is no setting (a misspelt name) is found with the closest
// setting's name, and refused under GONCCL_UNKNOWN_ENV=error; the tools' variables are
// not reported.
func TestUnknownVariables(t *testing.T) {
	t.Setenv("GONCCL_TIMOUT_MS", "10000")
	t.Setenv("GONCCL_PYTHON", "/usr/bin/python3")
	t.Setenv("GONCCL_TEST_RANK", "0")
	cfg, err := loadConfig()
	require.NoError(t, err)
	require.Equal(t, []settings.Unknown{{Name: "GONCCL_TIMOUT_MS", Closest: "GONCCL_TIMEOUT_MS"}}, cfg.unknown)

	t.Setenv("GONCCL_UNKNOWN_ENV", "error")
	_, err = loadConfig()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "GONCCL_TIMOUT_MS is not a setting gonccl knows (did you mean GONCCL_TIMEOUT_MS?)")
}
