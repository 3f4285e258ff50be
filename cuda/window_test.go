package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// One-sided windows over device memory (core.Window.RegisterDevice + cuda.DevWindow)
// against the fake driver, ranks in separate processes: each round every rank puts
// values that name it and the round into every rank's window (itself included) at its
// own offset, signals, and checks, after wait_signal from each peer, that its window
// holds each peer's values; it also reads its own part of each peer's window through
// the peer's mapping (map_remote_tensor's memory). The fake's copies run late (random
// delays), so a signal that went out before its puts landed shows as a MISMATCH.
// Closing the window unmaps everywhere before the barrier, and then the exporter frees
// its memory: the fake checks no live process maps it.

const winElems = 1000

func TestDevWindowAcrossProcesses(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "window")
	for _, tc := range []struct{ name, layout, conns string }{
		{"two-devices", "0,1", ""},
		{"one-device", "0,0,0", ""},
		{"mixed-one-queue", "0,1,0", "1"}, // CUDA_DEVICE_MAX_CONNECTIONS=1
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runDevRanksEnv(t, tc.layout, "", "0,200", func(int) []string {
				if tc.conns == "" {
					return nil
				}
				return []string{"CUDA_DEVICE_MAX_CONNECTIONS=" + tc.conns}
			})
			require.NoError(t, err, "%s", out)
			require.Equal(t, strings.Count(tc.layout, ",")+1, strings.Count(out, "window checks passed"), "%s", out)
		})
	}
}

// TestDevWindowEarlySignalFails shows the checks catch a signal that does not wait
// for its puts ("window-signal-early") and a put one element off ("window-put-offset").
func TestDevWindowEarlySignalFails(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "window")
	requireFaultsCaught(t, "0,1", "2000,5000", "window-signal-early", "window-put-offset")
}

// TestDevWindowDeadPeer: rank 1 dies after registering; rank 0's wait_signal fails at
// its timeout naming rank 1, and its put to the dead rank is refused, naming it.
func TestDevWindowDeadPeer(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "window-dead")
	out, err := runDevRanks(t, "0,1", "", "0,50")
	require.Error(t, err, "%s", out) // rank 1 exits 7 on purpose
	require.Contains(t, out, "rank 0: wait_signal failed as it should:", "%s", out)
	require.Contains(t, out, "from rank 1", "%s", out)
	require.Contains(t, out, "put to rank 1: its process", "%s", out)
	require.NotContains(t, out, "rank 0 FAILED", "%s", out)
}

// TestDevWindowMixedRefused: a window where one rank registers host memory and the
// others device memory fails on every rank, saying so.
func TestDevWindowMixedRefused(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "window-mixed")
	out, err := runDevRanks(t, "0,1,0", "", "0,50")
	require.NoError(t, err, "%s", out)
	require.Equal(t, 3, strings.Count(out, "rank 0 registered host memory and rank 1 device memory"), "%s", out)
}

// winValue is what rank from puts at element i of round k.
func winValue(from, k, i int) float32 { return float32(from*100000 + k*1000 + i) }

// windowRank is one rank of the window scripts.
func windowRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	script := os.Getenv("GONCCL_DEVTEST_SCRIPT")
	timeout := 60 * time.Second
	if script == "window-dead" {
		timeout = 2 * time.Second
	}
	r, err := openRank(d, f, id, rank, devs, timeout)
	if err != nil {
		return err
	}
	defer r.c.Destroy()
	c, dev, s, ctx := r.c, r.dev, r.s, r.ctx
	bytes := nranks * winElems * 4
	buf, err := d.MemAllocIn(ctx, bytes)
	if err != nil {
		return err
	}
	src, err := d.MemAllocIn(ctx, winElems*4)
	if err != nil {
		return err
	}
	w, err := c.NewWindow()
	if err != nil {
		return err
	}
	if script == "window-mixed" && rank == 0 {
		err = w.Register(nil, nranks*winElems, core.Float32)
	} else {
		err = w.RegisterDevice(nranks*winElems, core.Float32)
	}
	if script == "window-mixed" {
		if err == nil {
			return fmt.Errorf("rank %d: a window mixing host and device memory was accepted", rank)
		}
		fmt.Fprintf(log, "rank %d: refused: %v\n", rank, err)
		return nil
	}
	if err != nil {
		return err
	}
	var problem error
	for p := range nranks {
		if a, _ := w.Attr(p); a != core.AccessUnified {
			problem = fmt.Errorf("cannot map rank %d's signal counters", p)
		}
	}
	if got, ok := d.DevicePointer(buf); !ok || got != dev {
		return fmt.Errorf("rank %d: DevicePointer(%#x) = %d, %v; want device %d", rank, buf, got, ok, dev)
	}
	exchange := hostExchange(c)
	dw, err := cuda.NewDevWindow(d, dev, rank, nranks, buf, bytes, timeout, problem, exchange)
	if err != nil {
		return err
	}
	signal := func(q int) error {
		run, err := dw.Signal(q, time.Now().Add(timeout), func() error {
			req, err := w.Signal(q)
			if err == nil {
				_, err = req.Wait(-1)
			}
			return err
		})
		if err != nil {
			return err
		}
		return run()
	}
	if script == "window-dead" {
		return windowDead(f, c, w, dw, s, src, rank, log)
	}
	var bad []string
	vals := make([]float32, winElems)
	for k := range 4 {
		for i := range vals {
			vals[i] = winValue(rank, k, i)
		}
		f.Drain(uintptr(s)) // the previous round's puts read src
		f.SetFloats(src, vals)
		for q := range nranks {
			if err := dw.Put(s, src, winElems*4, q, rank*winElems*4); err != nil {
				return err
			}
			if err := signal(q); err != nil {
				return err
			}
			// The signal went out after the put landed: the peer's mapping shows it.
			got := f.Floats(dw.Ptr(q)+uintptr(rank*winElems*4), winElems)
			if i := firstFloatDiff(got, vals); i >= 0 {
				bad = append(bad, fmt.Sprintf("MISMATCH round %d: rank %d's window as mapped here, element %d: %v, want %v", k, q, rank*winElems+i, got[i], vals[i]))
			}
		}
		for p := range nranks {
			req, err := w.WaitSignal(p)
			if err == nil {
				_, err = req.Wait(-1)
			}
			if err != nil {
				return err
			}
			for i := range vals {
				vals[i] = winValue(p, k, i)
			}
			got := f.Floats(buf+uintptr(p*winElems*4), winElems)
			if i := firstFloatDiff(got, vals); i >= 0 {
				bad = append(bad, fmt.Sprintf("MISMATCH round %d: from rank %d, element %d: %v, want %v", k, p, i, got[i], vals[i]))
			}
		}
		// Nobody puts the next round before everyone has checked this one.
		req, err := c.Barrier()
		if err == nil {
			_, err = req.Wait(-1)
		}
		if err != nil {
			return err
		}
	}
	if err := dw.Close(); err != nil {
		return err
	}
	if err := w.Deregister(); err != nil {
		return err
	}
	// Every peer has unmapped this rank's memory: the fake checks as it frees.
	if err := d.MemFreeIn(ctx, buf); err != nil {
		return err
	}
	if err := d.MemFreeIn(ctx, src); err != nil {
		return err
	}
	if n := f.Counters().BadAccess; n != 0 {
		bad = append(bad, fmt.Sprintf("%d bad accesses", n))
	}
	if len(bad) > 0 {
		fmt.Fprintln(log, strings.Join(bad, "\n"))
		return fmt.Errorf("rank %d: %d check(s) failed", rank, len(bad))
	}
	fmt.Fprintf(log, "rank %d: window checks passed\n", rank)
	return nil
}

// windowDead: rank 1 exits; rank 0 waits for its signal, then puts to it.
func windowDead(f *cudatest.Fake, c *core.Comm, w *core.Window, dw *cuda.DevWindow, s driver.Stream, src uintptr, rank int, log *os.File) error {
	if rank == 1 {
		os.Exit(7)
	}
	req, err := w.WaitSignal(1)
	if err == nil {
		_, err = req.Wait(-1)
	}
	if err == nil || !strings.Contains(err.Error(), "rank 1") {
		fmt.Fprintf(log, "rank 0 FAILED: wait_signal from a dead rank 1 returned %v\n", err)
		return errors.New("wrong wait_signal result")
	}
	fmt.Fprintf(log, "rank 0: wait_signal failed as it should: %v\n", err)
	err = dw.Put(s, src, 4, 1, 0)
	fmt.Fprintf(log, "rank 0: put: %v\n", err)
	if err == nil {
		return errors.New("rank 0 FAILED: a put to a dead rank was accepted")
	}
	return dw.Close()
}

func firstFloatDiff(got, want []float32) int {
	for i := range want {
		if got[i] != want[i] {
			return i
		}
	}
	return -1
}

// TestDevWindowOverCuMemCreateMemoryRefused: memory from cuMemCreate (PyTorch's
// expandable segments; the fake now has it) cannot be exported through CUDA IPC: a
// window over it is refused on every rank, saying why and what to allocate instead,
// before anything is mapped.
func TestDevWindowOverCuMemCreateMemoryRefused(t *testing.T) {
	d, f := open(t)
	devs := []int{0, 1}
	ex := &memExchange{recs: make([][]byte, len(devs)), done: make(chan struct{})}
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for r, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var e driver.Exported
			ctx := driver.Context(f.Context(dev))
			if errs[r] = d.Do(ctx, func() (err error) { e, err = d.MemCreateExported(dev, 1<<20); return err }); errs[r] != nil {
				return
			}
			defer func() {
				_ = unix.Close(e.FD)
				_ = d.Do(ctx, func() error { return d.MemUnmapShared(e.Ptr, e.Size) })
			}()
			w, err := cuda.NewDevWindow(d, dev, r, len(devs), e.Ptr, 4096, time.Minute, nil, ex.rank(r))
			if w != nil {
				_ = w.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.ErrorIs(t, err, cuda.ErrWindowRefused, "rank %d", r)
		require.ErrorContains(t, err, "expandable segments", "rank %d", r)
		require.ErrorContains(t, err, "use cudaMalloc", "rank %d", r)
	}
}

// TestDevWindowOverPoolMemoryRefused: memory of a stream-ordered pool (cudaMallocAsync,
// what PyTorch allocates with PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync; the fake
// now has it) cannot be exported through CUDA IPC either: a window over it is refused on
// every rank, naming the allocator setting, not expandable segments.
func TestDevWindowOverPoolMemoryRefused(t *testing.T) {
	d, f := open(t)
	p, err := cudatest.OpenPool(cudatest.Path(t))
	require.NoError(t, err)
	devs := []int{0, 1}
	ex := &memExchange{recs: make([][]byte, len(devs)), done: make(chan struct{})}
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for r, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := driver.Context(f.Context(dev))
			s := f.Stream(dev)
			var mem uintptr
			if errs[r] = d.Do(ctx, func() error {
				var res int
				if mem, res = p.Alloc(1<<20, s); res != 0 {
					return fmt.Errorf("cuMemAllocAsync: %d", res)
				}
				return nil
			}); errs[r] != nil {
				return
			}
			defer func() { _ = d.Do(ctx, func() error { p.Free(mem, s); f.Drain(s); return nil }) }()
			w, err := cuda.NewDevWindow(d, dev, r, len(devs), mem, 4096, time.Minute, nil, ex.rank(r))
			if w != nil {
				_ = w.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.ErrorIs(t, err, cuda.ErrWindowRefused, "rank %d", r)
		require.ErrorContains(t, err, "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync", "rank %d", r)
		require.NotContains(t, err.Error(), "expandable segments", "rank %d", r)
	}
}

// TestExitingReadsTheExitFlag: a process that has begun to exit (PF_EXITING in its
// /proc/PID/stat flags: its sockets may already be closed) or is a zombie counts as
// gone; a running one, and a line that cannot be read, do not.
func TestExitingReadsTheExitFlag(t *testing.T) {
	for _, c := range []struct {
		stat string
		want bool
	}{
		{"123 (a (b) c) R 1 123 123 0 -1 4194560 100 0 0 0", false},
		{"123 (a (b) c) R 1 123 123 0 -1 4194564 100 0 0 0", true}, // PF_EXITING
		{"123 (a) S 1 123 123 0 -1 4210752 100", false},
		{"123 (a) Z 1 123 123 0 -1 4227084 100", true},
		{"123 (a) X 1", true},
		{"123 (a) R 1", false},
		{"garbage", false},
	} {
		require.Equal(t, c.want, cuda.Exiting([]byte(c.stat)), c.stat)
	}
	b, err := os.ReadFile("/proc/self/stat")
	require.NoError(t, err)
	require.False(t, cuda.Exiting(b), "this process")
}
