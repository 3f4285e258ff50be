package kernels_test

import (
	"os"
	"testing"

	"github.com/gonccl/gonccl/cuda/cudatest"
)

// TestMain removes the fake driver cudatest.Load built.
func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }
