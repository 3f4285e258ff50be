package termsig

import (
	"os/signal"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Go program (this test binary) installs a handler for every signal at start, so
// Default is false here; in libgonccl.so, where Go installs none for SIGTERM, it is
// true (tests/test_trace.py checks what follows from that).
func TestDefault(t *testing.T) {
	require.False(t, Default(), "Go's own handler")
	signal.Ignore(syscall.SIGTERM)
	defer signal.Reset(syscall.SIGTERM)
	require.False(t, Default(), "ignored")
}
