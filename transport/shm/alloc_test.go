package shm

import (
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// FindRegion places a buffer inside a live region (not one that runs past its end,
// nor one of a freed region), and a mapping from OpenRegion sees the owner's bytes.
func TestFindAndOpenRegion(t *testing.T) {
	a, err := Alloc(3 * 4096)
	require.NoError(t, err)
	b, err := Alloc(4096)
	require.NoError(t, err)
	defer b.Free()

	ref, ok := FindRegion(a.Mem[100:200])
	require.True(t, ok)
	require.Equal(t, 100, ref.Off)
	require.Equal(t, 3*4096, ref.Size)
	require.Equal(t, a, RegionAt(uintptr(ptrOf(a.Mem))))
	require.Nil(t, RegionAt(uintptr(ptrOf(a.Mem[1:]))))
	_, ok = FindRegion(make([]byte, 100))
	require.False(t, ok, "ordinary memory counted as a region")
	_, ok = FindRegion(nil)
	require.False(t, ok)
	refB, ok := FindRegion(b.Mem)
	require.True(t, ok)
	require.NotEqual(t, ref.ID, refB.ID)

	copy(a.Mem[100:], "hello")
	p, err := OpenRegion(os.Getpid(), ref)
	require.NoError(t, err)
	require.Equal(t, "hello", string(p.Mem[100:105]))
	p.Mem[200] = 9 // writes land in the owner's region
	require.Equal(t, byte(9), a.Mem[200])
	require.NoError(t, p.Unmap())

	// A reference whose inode is not the file's is refused.
	bad := ref
	bad.Ino++
	_, err = OpenRegion(os.Getpid(), bad)
	require.ErrorContains(t, err, "not the peer's shared-memory region")

	require.True(t, RegionAlive(os.Getpid(), ref))
	freed := RegionsFreed()
	require.NoError(t, a.Free())
	require.False(t, RegionAlive(os.Getpid(), ref))
	require.Equal(t, freed+1, RegionsFreed())
	require.ErrorIs(t, a.Free(), ErrFreed)
	require.Nil(t, RegionAt(uintptr(ptrOf(a.Mem))))
}

func ptrOf(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
