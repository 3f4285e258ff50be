package fdpass

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestServeFetchPassesTheFile(t *testing.T) {
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	fd, err := unix.MemfdCreate("fdpass-test", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte("hello"))
	require.NoError(t, err)
	name := Name("test", secret)
	s, err := Serve(name, fd)
	require.NoError(t, err)
	for range 3 { // every fetcher gets it
		got, err := Fetch(name, time.Now().Add(5*time.Second))
		require.NoError(t, err)
		buf := make([]byte, 5)
		n, err := unix.Pread(got, buf, 0)
		require.NoError(t, err)
		require.Equal(t, "hello", string(buf[:n]))
		require.NoError(t, unix.Close(got))
	}
	s.Close()
	_, err = Fetch(name, time.Now().Add(50*time.Millisecond))
	require.Error(t, err, "a closed server hands out nothing")
}
