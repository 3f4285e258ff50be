package kernels_test

import (
	"os"
	"testing"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

// open builds the fake driver once per test binary and loads it.
func open(t testing.TB) (*driver.Driver, *cudatest.Fake) {
	t.Helper()
	return cudatest.Load(t)
}
