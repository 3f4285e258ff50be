package core

import (
	"os"
	"strings"
)

// hostIdentity names the machine and network namespace this process runs in: two ranks
// with the same identity can use same-host transports. Ranks in different network
// namespaces count as different hosts, which is how multi-host runs are tested on one
// machine.
func hostIdentity() string {
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	netns, _ := os.Readlink("/proc/self/ns/net")
	return name + "/" + strings.TrimSpace(string(boot)) + "/" + netns
}

// pidNamespace names this process's pid namespace ("pid:[4026531836]"): ranks in one
// can reach each other's files through /proc/PID/fd, which zero-copy needs.
func pidNamespace() string {
	ns, _ := os.Readlink("/proc/self/ns/pid")
	return ns
}

func hostname() string {
	name, err := os.Hostname()
	if err != nil {
		return "unknown-host"
	}
	return name
}
