package shm

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// A drained send ring's pages go back to the kernel and come back zeroed on the next
// send; a ring the peer has not read is left alone.
func TestReleaseSendOnlyWhenDrained(t *testing.T) {
	a, b := pair(t, 1<<16)
	defer a.Close()
	defer b.Close()
	dl := time.Now().Add(10 * time.Second)
	h := transport.Header{Seq: 1, Kind: 1}
	msg := []byte(strings.Repeat("x", 1000))
	require.NoError(t, a.Send(&h, msg, dl))
	require.ErrorIs(t, a.ReleaseSend(), ErrBusy)
	got := make([]byte, len(msg))
	require.NoError(t, b.Recv(&h, got, dl))
	require.NoError(t, a.ReleaseSend())
	require.Equal(t, make([]byte, 1000), a.tx.data[transport.HeaderSize:transport.HeaderSize+1000], "released pages still hold the data")
	require.Equal(t, 1<<16, a.SendRingBytes())
	h.Seq = 2
	require.NoError(t, a.Send(&h, msg, dl))
	require.NoError(t, b.Recv(&h, got, dl))
	require.Equal(t, msg, got)
}

func TestAllocIsSharedMemory(t *testing.T) {
	r, err := Alloc(5000)
	require.NoError(t, err)
	require.Len(t, r.Mem, 8192)
	r.Mem[0] = 7
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	require.Contains(t, string(maps), AllocName)
	require.NoError(t, r.Free())
	_, err = Alloc(0)
	require.Error(t, err)
}
