package core

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Options.Algo and Options.ChunkBytes set one communicator's algorithm restriction
// and chunk size over the environment's: an all_reduce restricted to recursive
// doubling runs small messages and refuses one above its size limit.
func TestOptionsAlgoAndChunk(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, 2, r, Options{Timeout: 20 * time.Second, Algo: "allreduce:rd", ChunkBytes: 8192})
		}()
	}
	wg.Wait()
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		t.Cleanup(func() { _ = c.Destroy() })
		require.Equal(t, 8192, c.cfg.chunkBytes)
		require.Equal(t, []Algo{AlgoRecDoubling}, c.cfg.algo[KindAllReduce])
	}
	count := 1000
	ins := [][]byte{inputs(Float32, Sum, count, 0, 1), inputs(Float32, Sum, count, 1, 1)}
	outs := [][]byte{make([]byte, 4*count), make([]byte, 4*count)}
	errs = onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(ins[c.rank], outs[c.rank], count, Float32, Sum)
	})
	want := reference(Float32, Sum, ins, count)
	for r := range comms {
		require.NoError(t, errs[r])
		require.Equal(t, want, outs[r])
	}
	big := make([]byte, 1<<20)
	req, err := comms[0].AllReduce(big, big, len(big)/4, Float32, Sum)
	if err == nil {
		err = wait(t, req, "a 1 MiB all_reduce restricted to rd")
	}
	require.ErrorIs(t, err, ErrNotSupported)
}

// Bad per-communicator options fail before joining, naming the option.
func TestOptionsRejected(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	_, err = NewComm(id, 2, 0, Options{Timeout: time.Second, Algo: "allreduce:bogus"})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "algorithm restriction")
	_, err = NewComm(id, 2, 0, Options{Timeout: time.Second, ChunkBytes: 100})
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "at least 4096")
}

// Ranks given different options all fail their init, naming the difference, instead
// of running operations that disagree.
func TestOptionsMustAgree(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := NewComm(id, 2, r, Options{Timeout: 20 * time.Second, ChunkBytes: 8192 * (r + 1)})
			if err == nil {
				_ = c.Destroy()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.ErrorIs(t, err, ErrInvalidArgument, "rank %d", r)
		require.ErrorContains(t, err, "every rank must pass the same", "rank %d", r)
		require.ErrorContains(t, err, "chunk size 16384", "rank %d", r)
	}
}
