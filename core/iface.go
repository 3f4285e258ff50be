package core

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/gonccl/gonccl/transport/tcp"
)

// selectInterface is tcp.SelectInterface for GONCCL_SOCKET_IFNAME's value spec; when
// nothing matches spec, the error lists the interfaces there are to choose from.
func selectInterface(spec string) (tcp.Interface, error) {
	ifc, err := tcp.SelectInterface(spec)
	if err == nil || spec == "" {
		return ifc, err
	}
	return ifc, invalidSetting(fmt.Sprintf("%v; this host's interfaces that are up with an address: %s "+
		"(set GONCCL_SOCKET_IFNAME to one that every rank can reach, e.g. =eth0, or unset it)", err, upInterfaces()))
}

// upInterfaces lists the interfaces that are up and have an address, with it:
// "lo (127.0.0.1), eth0 (10.0.0.2)".
func upInterfaces() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	var list []string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil || len(addrs) == 0 {
			continue
		}
		ip := addrs[0].String()
		if ipn, ok := addrs[0].(*net.IPNet); ok {
			ip = ipn.IP.String()
		}
		list = append(list, fmt.Sprintf("%s (%s)", ifc.Name, ip))
	}
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// listen opens a rank's (or the bootstrap root's) listener on ifc, on a port of
// GONCCL_PORT_RANGE when it is set; a range with every port taken is named with what
// to do about it.
func listen(ifc tcp.Interface, ports tcp.PortRange) (*net.TCPListener, error) {
	l, err := tcp.ListenIn(ifc, ports)
	if errors.Is(err, tcp.ErrPortsExhausted) {
		return nil, fmt.Errorf("%w (GONCCL_PORT_RANGE=%s: each rank of a host listens on a port of the range, "+
			"and the process that makes the unique id on one more; widen the range, or unset it to let the kernel pick)", err, ports)
	}
	return l, err
}
