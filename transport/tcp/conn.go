package tcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Listen opens a TCP listener on ifc's address with a port chosen by the kernel.
func Listen(ifc Interface) (*net.TCPListener, error) {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ifc.IP})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", ifc, err)
	}
	return l, nil
}

// Dial connects to addr, retrying refused connections until deadline (the peer may
// not be listening yet), then wraps the connection in TLS if t is set and proves the
// secret with DialHandshake.
func Dial(addr string, secret []byte, t *TLS, h Hello, deadline time.Time) (net.Conn, error) {
	backoff := 10 * time.Millisecond
	for {
		c, err := DialOnce(addr, secret, t, h, deadline)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().Add(backoff).After(deadline) {
			return c, err
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// DialOnce is Dial without retries: for a peer known to be listening already, a
// refused connection means it is gone.
func DialOnce(addr string, secret []byte, t *TLS, h Hello, deadline time.Time) (net.Conn, error) {
	return dialOnce(addr, secret, t, &h, deadline)
}

// dialOnce is DialOnce that keeps the handshake's nonces in h.
func dialOnce(addr string, secret []byte, t *TLS, h *Hello, deadline time.Time) (net.Conn, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	conn := c.(*net.TCPConn)
	tune(conn)
	grow(conn)
	sc, err := secureDial(conn, secret, t, h, deadline)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("handshake with %s: %w", addr, err)
	}
	return sc, nil
}

// tune sets the options every gonccl connection uses from its first byte.
func tune(c *net.TCPConn) {
	_ = c.SetNoDelay(true)
	_ = c.SetKeepAlive(true)
}

// linkBuffer is the socket buffer size (each way) of an authenticated connection.
const linkBuffer = 4 << 20

// grow gives c the socket buffers of a link.
func grow(c *net.TCPConn) {
	_ = c.SetReadBuffer(linkBuffer)
	_ = c.SetWriteBuffer(linkBuffer)
}

// Accepted tunes a connection returned by a listener's Accept. Its buffers stay the
// kernel's defaults until it has proven itself (Accept grows them): a stranger's
// connections cost the kernel no more than any other.
func Accepted(c *net.TCPConn) { tune(c) }

// Received is how many bytes the peer has sent on c so far (TCP_INFO's bytes_received,
// read or not), or 0 where c is no TCP connection.
func Received(c net.Conn) uint64 {
	tc := rawTCP(c)
	if tc == nil {
		return 0
	}
	sc, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	var n uint64
	_ = sc.Control(func(fd uintptr) {
		if info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
			n = info.Bytes_received
		}
	})
	return n
}
