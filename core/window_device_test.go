package core

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeviceWindowPeers: a device window needs every rank to register device memory,
// on one host, with shared memory; each refusal names a rank and says why. Every rank
// sees the same descriptions, so every rank gets the same answer.
func TestDeviceWindowPeers(t *testing.T) {
	hostA, hostB := [32]byte{1}, [32]byte{2}
	dev := func(host [32]byte) winInfo { return winInfo{device: true, shm: true, host: host} }
	require.NoError(t, deviceWindowPeers([]winInfo{dev(hostA), dev(hostA), dev(hostA)}))

	mixed := []winInfo{dev(hostA), {shm: true, host: hostA}, dev(hostA)}
	err := deviceWindowPeers(mixed)
	require.ErrorIs(t, err, ErrMismatch)
	require.ErrorContains(t, err, "rank 1 registered host memory and rank 0 device memory")

	err = deviceWindowPeers([]winInfo{dev(hostA), dev(hostA), dev(hostB)})
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "rank 2 runs on another host than rank 0")
	require.ErrorContains(t, err, "CUDA IPC")

	noShm := dev(hostA)
	noShm.shm = false
	err = deviceWindowPeers([]winInfo{dev(hostA), noShm})
	require.ErrorIs(t, err, ErrNotSupported)
	require.ErrorContains(t, err, "rank 1 has shared memory disabled")
}

// TestDeviceWindowInfoRoundTrip: the device flag survives the exchange's encoding.
func TestDeviceWindowInfoRoundTrip(t *testing.T) {
	b := make([]byte, winInfoBytes)
	in := winInfo{pid: 7, fd: 3, dtype: Float32, shm: true, device: true, bytes: 4096}
	in.encode(b)
	out, err := decodeWinInfo(b)
	require.NoError(t, err)
	require.Equal(t, in, out)
}
