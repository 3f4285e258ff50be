package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
)

// TestOneRankTakesNoDevicePath: under auto a communicator of one rank has nothing to
// share, so its first device operation neither allocates nor exports scratch, nor
// starts a watcher: its collectives are a copy. Before, it set up the device path
// (1 cuMemAlloc, 1 cuIpcGetMemHandle) for a communicator of one.
func TestOneRankTakesNoDevicePath(t *testing.T) {
	path, err := cudatest.BuildIn(t.TempDir())
	require.NoError(t, err)
	d, err := cuda.Open(path)
	require.NoError(t, err)
	f, err := cudatest.Open(path)
	require.NoError(t, err)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	c, err := core.NewComm(id, 1, 0, core.Options{Timeout: 10 * time.Second})
	require.NoError(t, err)
	defer c.Destroy()
	s := cuda.Stream(f.Stream(0))
	ctx, err := d.StreamContext(s)
	require.NoError(t, err)
	e := &commEntry{comm: c, devState: devState{devMode: devAuto}}
	v := &views{e: e, stream: s, drv: d, ctx: ctx}
	before, err := cudatest.StrictCountersAt(path)
	require.NoError(t, err)
	sh, _, err := v.devicePath(c)
	require.NoError(t, err)
	require.Nil(t, sh, "a communicator of one rank took the device path")
	after, err := cudatest.StrictCountersAt(path)
	require.NoError(t, err)
	delta := after.Sub(before)
	require.Zero(t, delta.DevAllocs, "device scratch allocated")
	require.Zero(t, delta.IpcExports, "device scratch exported")
}
