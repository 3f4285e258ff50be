package tcp

import (
	"fmt"
	"net"
	"strings"
)

// ifaceFilter is a parsed GONCCL_SOCKET_IFNAME value, NCCL's syntax: a comma-separated
// list of name prefixes; "^" before the list excludes instead of selects; "=" before
// it makes every entry an exact name.
type ifaceFilter struct {
	exclude bool
	exact   bool
	names   []string
}

func parseIfaceFilter(s string) ifaceFilter {
	var f ifaceFilter
	if strings.HasPrefix(s, "^") {
		f.exclude, s = true, s[1:]
	}
	if strings.HasPrefix(s, "=") {
		f.exact, s = true, s[1:]
	}
	for _, n := range strings.Split(s, ",") {
		if n = strings.TrimSpace(n); n != "" {
			f.names = append(f.names, n)
		}
	}
	return f
}

func (f ifaceFilter) matches(name string) bool {
	hit := false
	for _, n := range f.names {
		if (f.exact && name == n) || (!f.exact && strings.HasPrefix(name, n)) {
			hit = true
			break
		}
	}
	return hit != f.exclude
}

// Interface is the network interface and address that a rank listens and dials on.
type Interface struct {
	Name string
	IP   net.IP
}

func (i Interface) String() string { return fmt.Sprintf("%s:%s", i.Name, i.IP) }

// SelectInterface picks the interface to use. With a non-empty spec (the value of
// GONCCL_SOCKET_IFNAME) the first up interface with an address that matches it is
// chosen, or an error says none does. Without one, like NCCL, the first up interface
// that is neither loopback nor a container bridge is preferred, then loopback.
func SelectInterface(spec string) (Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return Interface{}, fmt.Errorf("listing network interfaces: %w", err)
	}
	var filters []ifaceFilter
	if spec != "" {
		filters = []ifaceFilter{parseIfaceFilter(spec)}
	} else {
		filters = []ifaceFilter{parseIfaceFilter("^docker,lo,virbr,veth,br-"), parseIfaceFilter("lo")}
	}
	for _, f := range filters {
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagUp == 0 || !f.matches(ifc.Name) {
				continue
			}
			if ip := firstAddr(ifc); ip != nil {
				return Interface{Name: ifc.Name, IP: ip}, nil
			}
		}
	}
	if spec != "" {
		return Interface{}, fmt.Errorf("no up interface with an IP address matches GONCCL_SOCKET_IFNAME=%q", spec)
	}
	return Interface{}, fmt.Errorf("no usable network interface found (not even loopback)")
}

// firstAddr returns the interface's first IPv4 address, else its first global IPv6 one.
func firstAddr(ifc net.Interface) net.IP {
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil {
			return ip4
		}
		if v6 == nil && !ipn.IP.IsLinkLocalUnicast() {
			v6 = ipn.IP
		}
	}
	return v6
}
