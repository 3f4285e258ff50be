package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// TestFakeIpcOpenIsReferenceCounted: the fake opens an IPC memory handle as the
// driver documents: a handle this context has open already gives the same pointer
// with its reference count raised, so one cuIpcCloseMemHandle no longer unmaps it;
// the last does. Before, every open mapped a fresh copy, which hid code that opens a
// handle twice and closes it once. Rank 1 exports an allocation; rank 0 opens it
// twice, copies from it after each close.
func TestFakeIpcOpenIsReferenceCounted(t *testing.T) {
	open(t)
	res := ranks{layout: "0,0", env: []string{"GONCCL_DEVTEST_SCRIPT=ipc-refcount", "FAKECUDA_DELAY_US=0,50"}, limit: 60 * time.Second}.run(t)
	require.NoError(t, res.err(), "%s", res.all())
	require.Contains(t, res.outs[0], "REFCOUNT OK", res.all())
}

// ipcRefcountRank is one rank of TestFakeIpcOpenIsReferenceCounted.
func ipcRefcountRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	r, err := openRank(d, f, id, rank, devs, 30*time.Second)
	if err != nil {
		return err
	}
	defer r.c.Destroy()
	c, s, ctx := r.c, r.s, r.ctx
	const n = 4096
	var mine uintptr
	var h [driver.IPCHandleSize]byte
	if rank == 1 {
		if mine, err = d.MemAllocIn(ctx, n); err != nil {
			return err
		}
		copy(f.Bytes(mine, n), bytes.Repeat([]byte{0x5A}, n))
		if err := d.Do(ctx, func() (err error) { h, err = d.IpcGetMemHandle(mine); return err }); err != nil {
			return err
		}
	}
	all, err := hostExchange(c)(h[:])
	if err != nil {
		return err
	}
	if rank == 1 {
		if err := barrier(c); err != nil { // rank 0 is done with the mapping
			return err
		}
		return d.MemFreeIn(ctx, mine)
	}
	copy(h[:], all[driver.IPCHandleSize:])
	dst := f.Malloc(devs[rank], n)
	err = d.Do(ctx, func() error {
		p1, err := d.IpcOpenMemHandle(h)
		if err != nil {
			return err
		}
		p2, err := d.IpcOpenMemHandle(h)
		if err != nil {
			return err
		}
		if p1 != p2 {
			return fmt.Errorf("the second open of one handle gave %#x, the first %#x: the driver returns the same pointer", p2, p1)
		}
		if err := d.IpcCloseMemHandle(p1); err != nil {
			return err
		}
		if err := d.MemcpyDtoD(dst, p2, n, s); err != nil {
			return fmt.Errorf("a copy from a handle opened twice and closed once: %w", err)
		}
		f.Drain(uintptr(s))
		if !bytes.Equal(f.Bytes(dst, n), bytes.Repeat([]byte{0x5A}, n)) {
			return errors.New("the copy from a handle opened twice and closed once did not read the exporter's bytes")
		}
		if err := d.IpcCloseMemHandle(p2); err != nil {
			return err
		}
		if err := d.MemcpyDtoD(dst, p2, n, s); err == nil {
			return errors.New("a copy from a handle closed as often as it was opened was queued")
		}
		return nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(log, "REFCOUNT OK")
	return barrier(c)
}

// barrier returns once every rank of c has called it. c.Barrier only enqueues the
// barrier: a caller that drops its request goes on before the others have come.
func barrier(c *core.Comm) error {
	req, err := c.Barrier()
	if err == nil {
		_, err = req.Wait(-1)
	}
	return err
}
