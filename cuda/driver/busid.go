package driver

import (
	"fmt"
	"strings"
)

// BusIDBytes is the room a PCI bus id takes in a record the ranks exchange.
const BusIDBytes = 32

// NormalizeBusID returns a PCI bus id as "dddd:bb:dd.f" (lower case, four-digit
// domain): NVML writes eight-digit domains in some fields and four in others.
func NormalizeBusID(id string) string {
	id = strings.ToLower(strings.TrimRight(strings.TrimSpace(id), "\x00"))
	var domain, bus, dev, fn uint64
	if _, err := fmt.Sscanf(id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn); err != nil {
		return id
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", domain, bus, dev, fn)
}

// NulTerminated is b up to its first NUL: a string field of a record the ranks exchange.
func NulTerminated(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
