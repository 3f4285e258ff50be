package tcp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"syscall"
)

// ErrPortsExhausted: every port of a PortRange was taken on the interface's address.
var ErrPortsExhausted = errors.New("every port of the range is in use")

// PortRange is the ports [Lo, Hi] listeners may bind; the zero value lets the kernel
// pick an ephemeral one.
type PortRange struct{ Lo, Hi int }

// Set reports whether r confines listeners (false for the zero value).
func (r PortRange) Set() bool { return r.Lo != 0 }

func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// ListenIn opens a TCP listener on ifc's address, on a port of r (or one the kernel
// picks when r is the zero value). The processes of a host share a range by trying
// its ports in turn from a random one, passing over those in use, so two starting at
// once seldom try the same port first; when every port is taken the error wraps
// ErrPortsExhausted. Any other failure to bind (no such address, a port below 1024
// without the privilege) ends the search at once.
func ListenIn(ifc Interface, r PortRange) (*net.TCPListener, error) {
	if !r.Set() {
		return Listen(ifc)
	}
	n := r.Hi - r.Lo + 1
	first := rand.IntN(n)
	for i := range n {
		port := r.Lo + (first+i)%n
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ifc.IP, Port: port})
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen on %s port %d: %w", ifc, port, err)
		}
	}
	return nil, fmt.Errorf("listen on %s: all %d ports of %s are in use: %w", ifc, n, r, ErrPortsExhausted)
}
