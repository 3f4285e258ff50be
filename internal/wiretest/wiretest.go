// Package wiretest holds what the wire tests of several packages share (core's,
// transport's and transport/tcp's fuzz targets). It is imported by tests only and
// imports no gonccl package, so that a package's own tests can use it.
package wiretest

import (
	"io"
	"net"
)

// Feed returns one end of a pipe whose other end writes data, then closes, and
// discards whatever the tested side writes back: a peer that sends exactly data.
func Feed(data []byte) net.Conn {
	a, b := net.Pipe()
	go func() {
		_, _ = b.Write(data)
		b.Close()
	}()
	go func() { _, _ = io.Copy(io.Discard, b) }()
	return a
}
