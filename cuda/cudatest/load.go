package cudatest

import (
	"os"
	"sync"
	"testing"

	"github.com/gonccl/gonccl/cuda/driver"
)

// loaded is the fake driver one test binary builds and loads: every package of cuda tests
// against the same copy.
var loaded struct {
	once sync.Once
	dir  string
	path string
	d    *driver.Driver
	f    *Fake
	err  error
}

// Load builds the fake driver once per test binary (into a directory Main removes) and
// loads it: as the driver the packages call, and as the tests' handle on its hooks.
func Load(t testing.TB) (*driver.Driver, *Fake) {
	t.Helper()
	loaded.once.Do(func() {
		if loaded.dir, loaded.err = os.MkdirTemp("", "gonccl-cuda-test"); loaded.err != nil {
			return
		}
		if loaded.path, loaded.err = BuildIn(loaded.dir); loaded.err != nil {
			return
		}
		if loaded.d, loaded.err = driver.Open(loaded.path); loaded.err != nil {
			return
		}
		loaded.f, loaded.err = Open(loaded.path)
	})
	if loaded.err != nil {
		t.Fatal(loaded.err)
	}
	return loaded.d, loaded.f
}

// Path is the fake driver Load builds and loads: child processes of a test load the
// same file.
func Path(t testing.TB) string {
	t.Helper()
	Load(t)
	return loaded.path
}

// Main runs a test binary's tests and removes what Load built; a test package's TestMain
// exits with what it returns.
func Main(m *testing.M) int {
	code := m.Run()
	if loaded.dir != "" {
		os.RemoveAll(loaded.dir)
	}
	return code
}
