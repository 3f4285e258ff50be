package cuda_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/samegpu"
)

// TestSameGPUFollowerFreesItsTensors: between operations a rank frees the memory of
// the tensor it gave the same-GPU path (cuMemFree of the allocation, as torch's
// allocator does on empty_cache or when it gives a segment back) and the next
// operation uses a tensor in new memory, or another tensor at the same address of an
// allocation it keeps (a block the caching allocator handed out again). Each result
// must be exact, and the launcher must map none of it: it reads and writes only the
// ranks' exchange buffers, so no mapping of freed memory can remain (the free must not
// find another process still mapping it, which the fake treats as the fault it is on
// a GPU: the memory stays pinned, or the mapping is undefined). The followers'
// exchange buffers grow twice on the way; the launcher must release its mapping of
// each outgrown one once the operations that used it have run, not keep it until it
// closes. Where the launcher mapped the followers' own allocations with
// cuIpcOpenMemHandle, the follower's first cuMemFree faulted.
func TestSameGPUFollowerFreesItsTensors(t *testing.T) {
	open(t)
	res := ranks{layout: "0,0,0", env: []string{"GONCCL_DEVTEST_SCRIPT=samegpu-realloc", "FAKECUDA_DELAY_US=0,50"},
		limit: 60 * time.Second}.run(t)
	require.False(t, res.timeout, "%s", res.all())
	require.NoError(t, res.err(), "%s", res.all())
	for r := range 3 {
		require.Contains(t, res.outs[r], fmt.Sprintf("rank %d: EXACT", r), "%s", res.all())
	}
	// Three exchange buffers per follower (two grown), the two outgrown released by
	// the launcher as soon as the operations that used them had run.
	require.Contains(t, res.outs[0], "rank 0: opened 0 IPC mappings, imported 6 exchange buffers, unmapped 4 before closing", "%s", res.all())
}

// sameGPURealloc is a rank of TestSameGPUFollowerFreesItsTensors.
func sameGPURealloc(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	r, err := openRank(d, f, id, rank, devs, 30*time.Second)
	if err != nil {
		return err
	}
	defer r.c.Destroy()
	c, s, ctx := r.c, r.s, r.ctx
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	before, err := cudatest.CallsAt(os.Getenv("GONCCL_DEVTEST_FAKE"))
	if err != nil {
		return err
	}
	g, err := samegpu.NewSameGPU(d, ctx, rank, nranks, 30*time.Second, hostExchange(c))
	if err != nil {
		return err
	}
	g.Watch(c.Err)
	// Round i: counts[i] floats of value rank+1+i, all_reduced in place, in memory
	// allocated for the round (even rounds: freed after it) or at the start of the
	// allocation of the round before (odd rounds: the same address, other contents
	// and size). The exchange buffers grow twice (at 2.8 MB and at 6 MB).
	counts := []int{1000, 1700, 2400, 1000, 700_000, 700_000, 1_500_000, 1000}
	var seg uintptr
	for i, count := range counts {
		if i%2 == 0 {
			if seg, err = d.MemAllocIn(ctx, 4*max(count, counts[i+1])); err != nil {
				return err
			}
		}
		in := make([]float32, count)
		for j := range in {
			in[j] = float32(rank + 1 + i + j%7)
		}
		f.SetFloats(seg, in)
		if err := g.AllReduce(s, red, seg, seg, count, core.Float32, core.Sum); err != nil {
			return fmt.Errorf("rank %d, round %d: %w", rank, i, err)
		}
		f.Drain(uintptr(s))
		got := f.Floats(seg, count)
		for j := range got {
			if want := float32(nranks*(nranks+1)/2 + nranks*(i+j%7)); got[j] != want {
				return fmt.Errorf("rank %d, round %d: element %d = %v, want %v", rank, i, j, got[j], want)
			}
		}
		if i%2 == 1 {
			// The rank's part of the operation has run (its stream waited for the
			// launcher's kernels): the tensor's memory goes back to the driver.
			if err := d.MemFreeIn(ctx, seg); err != nil {
				return fmt.Errorf("rank %d, round %d: freeing its tensor: %w", rank, i, err)
			}
		}
	}
	fmt.Fprintf(log, "rank %d: EXACT\n", rank)
	if err := barrier(c); err != nil {
		return err
	}
	after, err := cudatest.CallsAt(os.Getenv("GONCCL_DEVTEST_FAKE"))
	if err != nil {
		return err
	}
	calls := after.Sub(before)
	fmt.Fprintf(log, "rank %d: opened %d IPC mappings, imported %d exchange buffers, unmapped %d before closing\n", rank,
		calls["cuIpcOpenMemHandle"], calls["cuMemImportFromShareableHandle"], calls["cuMemUnmap"])
	return g.Close()
}
