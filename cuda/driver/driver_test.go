package driver_test

import (
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// TestMain removes the fake driver cudatest.Load built.
func TestMain(m *testing.M) { os.Exit(cudatest.Main(m)) }

func TestAbsentLibraryIsUnavailable(t *testing.T) {
	_, err := driver.Open("/nonexistent/libcuda.so.1")
	require.ErrorIs(t, err, driver.ErrUnavailable)
	require.ErrorContains(t, err, "/nonexistent/libcuda.so.1")
}

func TestLibraryWithoutTheSymbolsIsUnavailable(t *testing.T) {
	_, err := driver.Open("libc.so.6")
	require.ErrorIs(t, err, driver.ErrUnavailable)
	require.ErrorContains(t, err, "cuInit")
}

func TestInitFailureNamesTheCUDAError(t *testing.T) {
	d, _ := cudatest.Load(t)
	t.Setenv("FAKECUDA_INIT_ERROR", "1")
	_, err := driver.Open(d.Path())
	require.ErrorIs(t, err, driver.ErrUnavailable)
	var ce *driver.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	require.Equal(t, "cuInit", ce.Func)
	require.Equal(t, "CUDA_ERROR_NO_DEVICE", ce.Name)
	require.Contains(t, err.Error(), "cuda: cuInit: CUDA_ERROR_NO_DEVICE")
}

func TestStreamContextAndPointerDevice(t *testing.T) {
	d, f := cudatest.Load(t)
	s := f.Stream(3)
	ctx, err := d.StreamContext(driver.Stream(s))
	require.NoError(t, err)
	require.Equal(t, f.Context(3), uintptr(ctx))
	p := f.Malloc(3, 64)
	dev, err := d.PointerDevice(ctx, p)
	require.NoError(t, err)
	require.Equal(t, 3, dev)

	_, err = d.PointerDevice(ctx, uintptr(0x1000))
	require.EqualError(t, err, "cuda: cuPointerGetAttribute: CUDA_ERROR_INVALID_VALUE")
	_, err = d.StreamContext(driver.Stream(0x1234))
	require.EqualError(t, err, "cuda: cuStreamGetCtx: CUDA_ERROR_INVALID_HANDLE")
}
