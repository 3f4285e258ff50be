package cuda_test

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
)

// memExchange is a one-shot all-gather between goroutines.
type memExchange struct {
	mu    sync.Mutex
	recs  [][]byte
	count int
	done  chan struct{}
}

func (m *memExchange) rank(r int) func([]byte) ([]byte, error) {
	return func(rec []byte) ([]byte, error) {
		m.mu.Lock()
		m.recs[r] = rec
		m.count++
		if m.count == len(m.recs) {
			close(m.done)
		}
		m.mu.Unlock()
		<-m.done
		return bytes.Join(m.recs, nil), nil
	}
}

// TestSharedScratchSizesMustMatch: ranks whose GONCCL_DEVICE_SCRATCH differ would
// split operations into different rounds and wait on each other for ever; every rank
// is refused at setup instead, naming the setting.
func TestSharedScratchSizesMustMatch(t *testing.T) {
	d, f := open(t)
	sizes := []int{1 << 20, 2 << 20}
	ex := &memExchange{recs: make([][]byte, len(sizes)), done: make(chan struct{})}
	errs := make([]error, len(sizes))
	var wg sync.WaitGroup
	for r := range sizes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, err := d.StreamContext(driver.Stream(f.Stream(0)))
			if err != nil {
				errs[r] = err
				return
			}
			sh, err := cuda.NewShared(d, ctx, r, len(sizes), sizes[r], ex.rank(r))
			if sh != nil {
				sh.Abandon()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.ErrorContains(t, err, "rank 1 has 2097152 bytes of device scratch and rank 0 has 1048576", "rank %d", r)
		require.ErrorContains(t, err, "GONCCL_DEVICE_SCRATCH", "rank %d", r)
	}
}
