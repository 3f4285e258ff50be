package kernels_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/reduce"
)

// TestKernelsStamp fails when the committed fatbin is stale: a kernel source changed (or
// was added) since `make kernels` wrote the stamp, the stamp's nvcc version or flags are
// not the build script's, the fatbin is not the one the stamp describes, or a kernel
// the Go side launches is missing from it.
func TestKernelsStamp(t *testing.T) {
	stamp, err := os.ReadFile("gonccl_kernels.stamp")
	require.NoError(t, err)
	script, err := os.ReadFile(filepath.Join("..", "..", "scripts", "build-kernels.sh"))
	require.NoError(t, err)
	scriptVar := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `="?([^"\n]*)"?$`).FindSubmatch(script)
		require.NotNil(t, m, "scripts/build-kernels.sh sets no %s", name)
		return string(m[1])
	}
	const rebuild = " (run `make kernels` and commit cuda/kernels/)"

	var listed []string
	sc := bufio.NewScanner(bytes.NewReader(stamp))
	for sc.Scan() {
		line := sc.Text()
		key, rest, _ := strings.Cut(line, " ")
		switch key {
		case "nvcc":
			require.Equal(t, scriptVar("NVCC_VERSION"), rest, "the fatbin was built by another nvcc"+rebuild)
		case "flags":
			require.Equal(t, scriptVar("NVCC_FLAGS"), rest, "the fatbin was built with other flags"+rebuild)
		case "source", "fatbin":
			sum, file, ok := strings.Cut(rest, " ")
			require.True(t, ok, "stamp line %q", line)
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			got := sha256.Sum256(data)
			require.Equal(t, sum, hex.EncodeToString(got[:]), "%s changed since the fatbin was built"+rebuild, file)
			if key == "source" {
				listed = append(listed, file)
			} else {
				require.Equal(t, data, kernels.Fatbin, "the embedded fatbin is not %s", file)
			}
		}
	}
	var sources []string
	for _, pat := range []string{"*.cu", "*.cuh"} {
		m, err := filepath.Glob(pat)
		require.NoError(t, err)
		for _, p := range m {
			sources = append(sources, filepath.Base(p))
		}
	}
	sort.Strings(sources)
	sort.Strings(listed)
	require.Equal(t, sources, listed, "the kernel sources are not the ones the fatbin was built from"+rebuild)

	require.Equal(t, uint32(0xba55ed50), binary.LittleEndian.Uint32(kernels.Fatbin), "not a fatbin")
	names := kernels.KernelNames()
	require.Len(t, names, 186)
	for _, name := range names {
		require.True(t, bytes.Contains(kernels.Fatbin, append([]byte(name), 0)), "kernel %s is not in the fatbin"+rebuild, name)
	}
}

// onDevice runs f on a locked thread with device dev's context current, as Driver.do
// would, and returns the kernels loaded there and a stream of dev.
func onDevice(t *testing.T, dev int, f func(k *kernels.Kernels, s driver.Stream)) {
	t.Helper()
	d, fk := cudatest.Load(t)
	ctx := driver.Context(fk.Context(dev))
	k, err := kernels.Load(d, ctx)
	require.NoError(t, err)
	again, err := kernels.Load(d, ctx)
	require.NoError(t, err)
	require.Same(t, k, again, "LoadKernels caches the kernels per context")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fk.SetCurrent(uintptr(ctx))
	defer fk.SetCurrent(0)
	f(k, driver.Stream(fk.NonBlockingStream(dev)))
}

func TestKernelsRefuseUnsupportedPairs(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		p := fk.Malloc(0, 64)
		before := fk.Counters().Kernels
		for _, c := range []struct {
			dt       reduce.DataType
			op       reduce.RedOp
			sentinel error
		}{
			{reduce.Float32, reduce.Bxor, reduce.ErrInvalidArgument},
			{reduce.Complex64, reduce.Max, reduce.ErrInvalidArgument},
			{reduce.Bool, reduce.Avg, reduce.ErrInvalidArgument},
			{reduce.Float8e4m3, reduce.Sum, reduce.ErrNotSupported},
			{reduce.Float8e5m2, reduce.Min, reduce.ErrNotSupported},
			{reduce.DataType(99), reduce.Sum, reduce.ErrInvalidArgument},
		} {
			err := k.ReduceInto(s, p, p, 4, c.dt, c.op)
			require.ErrorIs(t, err, c.sentinel)
			require.ErrorContains(t, err, "no "+c.op.String()+" reduction kernel for "+c.dt.String())
		}
		err := k.DivideBy(s, p, 4, reduce.Bool, 2)
		require.ErrorIs(t, err, reduce.ErrInvalidArgument)
		require.ErrorContains(t, err, "no division kernel for bool (avg)")
		require.ErrorContains(t, k.DivideBy(s, p, 4, reduce.Float32, 0), "divisor 0 is not positive")
		require.ErrorContains(t, k.ReduceInto(s, p, p, -1, reduce.Float32, reduce.Sum), "negative count -1")
		require.ErrorContains(t, k.ReduceInto(s, 0, p, 1, reduce.Float32, reduce.Sum), "null device pointer")
		require.NoError(t, k.ReduceInto(s, 0, 0, 0, reduce.Float32, reduce.Sum), "nothing to reduce")
		fk.Drain(uintptr(s))
		require.Equal(t, before, fk.Counters().Kernels, "a refused call launches nothing")
		require.NoError(t, fk.Free(p))
	})
}

// TestKernelsRunInStreamOrder: a kernel runs after what was queued before it on its
// stream (a slow fill) and before what comes after (a check), like a copy; a kernel whose
// buffer is freed before it runs is caught as a bad access and writes nothing.
func TestKernelsRunInStreamOrder(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 1, func(k *kernels.Kernels, s driver.Stream) {
		const n = 1000
		dst, src := fk.Malloc(1, 4*n), fk.Malloc(1, 4*n)
		fk.SetFloats(src, filled(n, 2))
		before := fk.Counters()
		require.NoError(t, fk.Fill(uintptr(s), dst, n, 5, 20000))
		require.NoError(t, k.ReduceInto(s, dst, src, n, reduce.Float32, reduce.Sum))
		require.NoError(t, k.DivideBy(s, dst, n, reduce.Float32, 7))
		require.NoError(t, fk.Check(uintptr(s), dst, n, 1, 0))
		fk.Drain(uintptr(s))
		after := fk.Counters()
		require.Equal(t, before.StaleReads, after.StaleReads, "the check saw (5+2)/7 = 1 everywhere")
		require.Equal(t, before.Kernels+4, after.Kernels)

		require.NoError(t, fk.Fill(uintptr(s), dst, n, 5, 20000))
		require.NoError(t, k.ReduceInto(s, dst, src, n, reduce.Float32, reduce.Sum))
		require.NoError(t, fk.Free(src)) // while the kernel still waits behind the fill
		fk.Drain(uintptr(s))
		require.Equal(t, after.BadAccess+1, fk.Counters().BadAccess)
		require.Equal(t, filled(n, 5), fk.Floats(dst, n), "the kernel on freed memory wrote nothing")
		require.NoError(t, fk.Free(dst))
	})
}

func TestKernelsLoadFailureSaysWhatTheyNeed(t *testing.T) {
	d, fk := cudatest.Load(t)
	t.Setenv("FAKECUDA_MODULE_ERROR", "222") // CUDA_ERROR_UNSUPPORTED_PTX_VERSION
	_, err := kernels.Load(d, driver.Context(fk.Context(5)))
	require.ErrorContains(t, err, "they need an R580 driver or newer")
	var ce *driver.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 222, ce.Code)
	t.Setenv("FAKECUDA_MODULE_ERROR", "")
	_, err = kernels.Load(d, driver.Context(fk.Context(5)))
	require.NoError(t, err, "a failed load is not cached")
}

func TestKernelsUnloadAndReload(t *testing.T) {
	d, fk := cudatest.Load(t)
	ctx := driver.Context(fk.Context(2))
	k, err := kernels.Load(d, ctx)
	require.NoError(t, err)
	require.NoError(t, kernels.Unload(d, ctx))
	require.NoError(t, kernels.Unload(d, ctx), "unloading twice is harmless")
	k2, err := kernels.Load(d, ctx)
	require.NoError(t, err)
	require.NotSame(t, k, k2)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fk.SetCurrent(uintptr(ctx))
	defer fk.SetCurrent(0)
	p := fk.Malloc(2, 8)
	s := driver.Stream(fk.Stream(2))
	require.EqualError(t, k.ReduceInto(s, p, p, 2, reduce.Int32, reduce.Sum), "cuda: cuLaunchKernel: CUDA_ERROR_INVALID_HANDLE",
		"an unloaded module's kernels do not launch")
	require.NoError(t, k2.ReduceInto(s, p, p, 2, reduce.Int32, reduce.Sum))
	other := driver.Stream(fk.Stream(3))
	require.EqualError(t, k2.ReduceInto(other, p, p, 2, reduce.Int32, reduce.Sum), "cuda: cuLaunchKernel: CUDA_ERROR_INVALID_HANDLE",
		"a stream of another context is refused")
	fk.Drain(uintptr(s))
	require.NoError(t, fk.Free(p))
}

func filled(n int, v float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = v
	}
	return out
}
