package cuda_test

import (
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// open builds the fake driver once per test binary and loads it.
func open(t testing.TB) (*driver.Driver, *cudatest.Fake) {
	t.Helper()
	return cudatest.Load(t)
}

func TestMain(m *testing.M) {
	if what := os.Getenv("GONCCL_FAULTTEST"); what != "" {
		os.Exit(faultChild(what)) // a rank of runFaultRanks
	}
	if os.Getenv("GONCCL_DEVTEST_RANK") != "" {
		os.Exit(devChild()) // a rank of runDevRanks
	}
	os.Exit(cudatest.Main(m))
}

// hostExchange is NewShared's exchange over c: a host all-gather of each rank's record.
func hostExchange(c *core.Comm) func([]byte) ([]byte, error) {
	return func(rec []byte) ([]byte, error) {
		all := make([]byte, len(rec)*c.Size())
		req, err := c.AllGather(rec, all, len(rec), core.Uint8)
		if err == nil {
			_, err = req.Wait(-1)
		}
		return all, err
	}
}

// inProcessRanks runs rank(r) for n ranks as goroutines of this process and requires
// that none failed.
func inProcessRanks(t testing.TB, n int, rank func(r int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = rank(r)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// requireFaultsCaught runs the ranks of layout (runDevRanks, the fake's delays as
// given) once per fault, each in a subtest, and requires that every run fails with a
// MISMATCH: the checks of the script notice that step done wrong.
func requireFaultsCaught(t *testing.T, layout, delay string, faults ...string) {
	for _, f := range faults {
		t.Run(f, func(t *testing.T) {
			out, err := runDevRanks(t, layout, f, delay)
			require.Error(t, err, "the %s fault went unnoticed:\n%s", f, out)
			require.Contains(t, out, "MISMATCH", "%s", out)
		})
	}
}

// requireLayoutsPass runs the ranks of each layout (runDevRanks, short fake delays),
// each in a subtest named after it, and requires that every rank passes.
func requireLayoutsPass(t *testing.T, layouts ...string) {
	for _, layout := range layouts {
		t.Run(strings.ReplaceAll(layout, ",", "-"), func(t *testing.T) {
			out, err := runDevRanks(t, layout, "", "0,200")
			require.NoError(t, err, "%s", out)
		})
	}
}
