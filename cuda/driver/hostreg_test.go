package driver_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// TestFakeHostRegisterFlags: the fake gives registered host memory a device address
// only where it was registered with CU_MEMHOSTREGISTER_DEVICEMAP, and refuses flags the
// driver does not define, as the driver does (it ignored the flags).
func TestFakeHostRegisterFlags(t *testing.T) {
	d, f := cudatest.Load(t)
	ctx := driver.Context(f.Context(0))
	const n = 1 << 16
	for _, c := range []struct {
		flags  uint
		reg    bool // the registration succeeds
		mapped bool // and has a device address
	}{{0x1, true, false}, {0x1 | 0x2, true, true}, {0x2, true, true}, {0x100, false, false}} {
		host, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		require.NoError(t, err)
		p := unsafe.Pointer(&host[0])
		require.NoError(t, d.Do(ctx, func() error {
			err := d.HostRegister(p, n, c.flags)
			if !c.reg {
				require.Error(t, err, "flags %#x", c.flags)
				return nil
			}
			require.NoError(t, err, "flags %#x", c.flags)
			_, err = d.HostDevicePointer(p)
			if c.mapped {
				require.NoError(t, err, "flags %#x", c.flags)
			} else {
				require.ErrorContains(t, err, "CUDA_ERROR_INVALID_VALUE", "flags %#x: a device address without DEVICEMAP", c.flags)
			}
			return d.HostUnregister(p)
		}))
		require.NoError(t, unix.Munmap(host))
	}
}
