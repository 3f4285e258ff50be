package devroute

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/route"
)

// TestStagedChunkSetting: staged operations are pipelined only when asked for by name
// (GONCCL_STAGED_CHUNK), under GONCCL_DEVICE_PATH=model, or where the GPU check has
// proven the pipelined staged path on the ranks' setup (nowhere yet): auto's default
// is one copy each way.
func TestStagedChunkSetting(t *testing.T) {
	auto := &Comm{devState: devState{devMode: devAuto}}
	model := &Comm{devState: devState{devMode: devModel}}
	shared := &Comm{devState: devState{devMode: devAuto, devSetup: route.SharedGPU, devSetupKnown: true}}
	for v, want := range map[string]int{"4194304": 4 << 20, "64K": 64 << 10, " 1m ": 1 << 20, "0": 0, "16G": 16 << 30} {
		t.Setenv("GONCCL_STAGED_CHUNK", v)
		for _, e := range []*Comm{auto, model, shared} {
			e.set = readSettings() // as at the communicator's creation
			got, err := e.stagedChunk()
			require.NoError(t, err, v)
			require.Equal(t, want, got, v)
		}
	}
	t.Setenv("GONCCL_STAGED_CHUNK", "")
	for e, want := range map[*Comm]int{auto: 0, model: stagedChunkBytes, shared: 0} {
		e.set = readSettings()
		got, err := e.stagedChunk()
		require.NoError(t, err)
		require.Equal(t, want, got, "mode %d", e.devMode)
		require.Equal(t, want > 0, e.pipelined())
	}
	for _, v := range []string{"abc", "-1", "17G", "1.5M", "4T"} {
		t.Setenv("GONCCL_STAGED_CHUNK", v)
		auto.set = readSettings()
		_, err := auto.stagedChunk()
		require.ErrorContains(t, err, "GONCCL_STAGED_CHUNK", v)
	}
}

func TestStagedPinnedSetting(t *testing.T) {
	for v, want := range map[string]int{"": stagedPinnedBytes, "67108864": 64 << 20, "16m": 16 << 20, "0": 0, " 2G ": 2 << 30} {
		t.Setenv("GONCCL_STAGED_PINNED", v)
		got, err := stagedPinned()
		require.NoError(t, err, v)
		require.Equal(t, want, got, v)
	}
	for _, v := range []string{"lots", "-1", "1025G", "0.5G"} {
		t.Setenv("GONCCL_STAGED_PINNED", v)
		_, err := stagedPinned()
		require.ErrorContains(t, err, "GONCCL_STAGED_PINNED", v)
	}
}

// TestStagedPlan: what a rank's chunking depends on is what every rank agrees on; an
// operation of one chunk or less is not pipelined; the number of chunks is bounded.
func TestStagedPlan(t *testing.T) {
	for _, tc := range []struct {
		count, blocks, chunk int
		per, n               int
	}{
		{count: 1 << 20, blocks: 1, chunk: 1 << 20, per: 1 << 18, n: 4},   // 4 MiB of fp32 in 1 MiB chunks
		{count: 1<<18 + 1, blocks: 1, chunk: 1 << 20, per: 1 << 18, n: 2}, // not a multiple of the chunk
		{count: 1 << 18, blocks: 1, chunk: 1 << 20, per: 1 << 18, n: 1},   // one chunk: not pipelined
		{count: 1 << 18, blocks: 4, chunk: 1 << 20, per: 1 << 16, n: 4},   // all_gather of 4 ranks: the chunk spans the blocks
		{count: 1 << 30, blocks: 1, chunk: 1 << 20, per: 1 << 24, n: 64},  // bounded: larger chunks
		{count: 1000, blocks: 1, chunk: 0, per: 1000, n: 1},               // off
		{count: 0, blocks: 1, chunk: 1 << 20, per: 0, n: 1},               // empty
		{count: 10, blocks: 3, chunk: 4, per: 1, n: 10},                   // a chunk smaller than one element per block
	} {
		per, n := stagedPlan(tc.count, core.Float32, tc.blocks, tc.chunk)
		require.Equal(t, tc.per, per, "%+v", tc)
		require.Equal(t, tc.n, n, "%+v", tc)
	}
}

func TestStagedReduceSetting(t *testing.T) {
	for v, want := range map[string]bool{"": true, "gpu": true, " GPU ": true, "cpu": false} {
		t.Setenv("GONCCL_STAGED_REDUCE", v)
		got, err := stagedReduceOnGPU()
		require.NoError(t, err, v)
		require.Equal(t, want, got, v)
	}
	t.Setenv("GONCCL_STAGED_REDUCE", "host")
	_, err := stagedReduceOnGPU()
	require.ErrorContains(t, err, "GONCCL_STAGED_REDUCE")
}
