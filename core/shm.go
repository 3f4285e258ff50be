package core

import (
	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
)

// transportName names the transport of link, for the INIT log.
func transportName(l transport.Link) string {
	if _, ok := l.(*shm.Link); ok {
		return "shm"
	}
	return "tcp"
}
