package core

import (
	"strings"

	settings "github.com/gonccl/gonccl/internal/config"
)

// The user guide's page of environment variables, docs/environment.md, is generated
// from Params (and from the few variables read outside core, below) between two
// markers, one table per group. TestEnvironmentDoc fails when the page is stale; its
// -update flag rewrites it.

// envDocBegin and envDocEnd delimit the generated part of docs/environment.md.
const (
	envDocBegin = "<!-- generated from core.Params: go test ./core -run TestEnvironmentDoc -update -->\n"
	envDocEnd   = "<!-- end of the generated tables -->\n"
)

// envGroup is one section of the page: a heading and which variables it holds.
type envGroup struct {
	key, title string
}

// envGroups are the page's sections, in order.
var envGroups = []envGroup{
	{"debug", "Debugging and logs"},
	{"network", "Network"},
	{"tuning", "Tuning"},
	{"gpu", "GPUs"},
	{"fault", "Fault detection and timeouts"},
	{"build", "Build (read by `pip install` and `make wheel`, not at run time)"},
	{"test", "Test only (never set them in production)"},
}

// envGroupOf says which group a variable belongs to: by name where the prefix does
// not say, else by prefix; a variable no rule names is a tuning knob.
func envGroupOf(name string) string {
	byName := map[string]string{
		"GONCCL_SHM_DISABLE":          "network",
		"GONCCL_UNKNOWN_ENV":          "debug",
		"GONCCL_NSOCKS_PERTHREAD":     "network",
		"GONCCL_RUNTIME_CONNECT":      "network",
		"GONCCL_PORT_RANGE":           "network",
		"GONCCL_P2P_DISABLE":          "gpu",
		"GONCCL_CUDA_LIBRARY":         "gpu",
		"GONCCL_TIMEOUT_MS":           "fault",
		"GONCCL_HEARTBEAT_TIMEOUT_MS": "fault",
		"GONCCL_LIBRARY":              "build",
		"GONCCL_SKIP_GO_BUILD":        "build",
	}
	if g, ok := byName[name]; ok {
		return g
	}
	prefixes := []struct{ prefix, group string }{
		{"GONCCL_TEST_", "test"},
		{"GONCCL_DEBUG", "debug"},
		{"GONCCL_TRACE_", "debug"},
		{"GONCCL_SOCKET_", "network"},
		{"GONCCL_TLS", "network"},
		{"GONCCL_DEVICE_", "gpu"},
		{"GONCCL_STAGED_", "gpu"},
		{"GONCCL_CUDA_", "gpu"},
		{"GONCCL_GPU_", "gpu"},
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p.prefix) {
			return p.group
		}
	}
	return "tuning"
}

// outsideParams are the variables read outside core's config: by setup.py at build
// time, and by the tests' helpers. They are documented with the others.
var outsideParams = []settings.Param[config]{
	{Name: "GONCCL_LIBRARY", Unset: "(build with Go)",
		Help: "a prebuilt `libgonccl.so` (from `make lib`, or taken out of a gonccl wheel) to package instead of running `go build`: only the C++ extension is compiled, so no Go toolchain is needed. The library must match the sources (its version and every function `gonccl.h` declares), else the build says which and stops. See [Install](install.md#without-go)"},
	{Name: "GONCCL_SKIP_GO_BUILD", Default: "0",
		Help: "`1`: build only the C++ extension (for work on csrc while the Go side does not build); the package is unusable until `libgonccl.so` is built"},
	{Name: "GONCCL_TEST_TIME_SCALE", Default: "1",
		Help: "multiplies every wall-clock limit of gonccl's own tests (Go and Python), for slow or crowded machines; see [Testing](development/testing.md)"},
}

// EnvironmentDoc renders the generated part of docs/environment.md: for each group, a
// heading and a table of its variables with their defaults and meanings.
func EnvironmentDoc() string {
	all := append(append([]settings.Param[config]{}, Params...), outsideParams...)
	var b strings.Builder
	for _, g := range envGroups {
		var rows []settings.Param[config]
		for _, p := range all {
			if envGroupOf(p.Name) == g.key {
				rows = append(rows, p)
			}
		}
		if len(rows) == 0 {
			continue
		}
		b.WriteString("### " + g.title + "\n\n| variable | default | meaning |\n|---|---|---|\n")
		b.WriteString(settings.Table(rows))
		b.WriteString("\n")
	}
	return b.String()
}

// spliceEnvDoc returns the generated part of doc (between the markers), doc with it
// replaced by rows, and whether doc has both markers.
func spliceEnvDoc(doc, rows string) (old, updated string, found bool) {
	i := strings.Index(doc, envDocBegin)
	j := strings.Index(doc, envDocEnd)
	if i < 0 || j < i {
		return "", "", false
	}
	start := i + len(envDocBegin)
	return doc[start:j], doc[:start] + rows + doc[j:], true
}

// toolVariables are GONCCL_* variables that gonccl's own build, test and benchmark
// tools read or set (the Makefile, scripts/, tests/, gonccl.bench's launcher), and
// toolPrefixes the families of them: not settings of the library, but not mistakes
// either, so no warning names them.
var (
	toolVariables = []string{"GONCCL_PYTHON", "GONCCL_VENV", "GONCCL_TORCH_VERSION", "GONCCL_REQUIRE",
		"GONCCL_EXHAUSTIVE", "GONCCL_CACHE", "GONCCL_PACKAGE_DIR", "GONCCL_NVCC_VENV", "GONCCL_TORCHFT_DIR",
		"GONCCL_BENCH_LAUNCHED", "GONCCL_FAULTTEST"}
	toolPrefixes = []string{"GONCCL_TEST_", "GONCCL_DEVTEST_", "GONCCL_DIFF_", "GONCCL_CHECK_", "GONCCL_2H_",
		"GONCCL_SHM_TEST_", "GONCCL_STRESS_", "GONCCL_SOAK_", "GONCCL_CHAOS_", "GONCCL_CFGTEST_", "GONCCL_CENV_TEST"}
)
