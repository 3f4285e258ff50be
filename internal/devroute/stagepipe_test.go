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
	for _, n := range []int{4 << 20, 64 << 10, 0, 16 << 30} {
		for _, e := range []*Comm{auto, model, shared} {
			e.set = core.DeviceSettings{StagedChunk: n, StagedChunkSet: true}
			got, err := e.stagedChunk()
			require.NoError(t, err)
			require.Equal(t, n, got)
		}
	}
	for e, want := range map[*Comm]int{auto: 0, model: stagedChunkBytes, shared: 0} {
		e.set = core.DeviceSettings{}
		got, err := e.stagedChunk()
		require.NoError(t, err)
		require.Equal(t, want, got, "mode %d", e.devMode)
		require.Equal(t, want > 0, e.pipelined())
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
