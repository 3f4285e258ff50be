package shm

import (
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/internal/fdpass"
)

// Handing a segment over a Unix socket, for a pair that cannot open each other's
// /proc/<pid>/fd: ranks sharing a network namespace but not a pid namespace (two
// containers of one Kubernetes pod, `docker run --network container:`). The opener,
// having failed to open the segment through /proc, listens on an abstract Unix socket
// (abstract names belong to the network namespace, so no shared file system is
// needed) named after a hash of the segment's token, and answers the offer with
// answerHandover; the creator connects and sends the memfd with SCM_RIGHTS; the
// opener maps it and checks the token in it, as for /proc. The name does not reveal
// the token, a sender with another uid is refused (SO_PEERCRED), and a file without
// the token is dropped while the opener keeps waiting for the right one until the
// setup's deadline.

// answerHandover answers an offer: "send the segment over handoverName(token)".
const answerHandover = 2

// handoverName is the abstract socket name for the segment with token.
func handoverName(token [tokenSize]byte) string { return fdpass.Name("shm", token[:]) }

// handoverListen starts the opener's side: a listener on handoverName(token).
func handoverListen(token [tokenSize]byte) (*net.UnixListener, error) {
	return fdpass.Listen(handoverName(token))
}

// handoverReceive accepts senders on l until one hands over a segment carrying token
// (mapped, returned) or deadline passes.
func handoverReceive(l *net.UnixListener, ringSize uint64, token [tokenSize]byte, deadline time.Time) (*segment, error) {
	if err := l.SetDeadline(deadline); err != nil {
		return nil, err
	}
	last := errors.New("no process handed the segment over")
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, fmt.Errorf("waiting for the segment over a unix socket: %w (%v)", err, last)
		}
		seg, err := receiveSegment(c, ringSize, token, deadline)
		c.Close()
		if err == nil {
			return seg, nil
		}
		last = err
	}
}

// receiveSegment reads one fd from c, a sender with this process's uid, and maps it if
// it is the segment with token.
func receiveSegment(c *net.UnixConn, ringSize uint64, token [tokenSize]byte, deadline time.Time) (*segment, error) {
	fd, err := fdpass.Receive(c, deadline)
	if err != nil {
		return nil, fmt.Errorf("receiving the segment: %w", err)
	}
	defer unix.Close(fd)
	return mapSegment(fd, fmt.Sprintf("the segment handed over (fd %d)", fd), ringSize, token)
}

// handoverSend is the creator's side: it passes fd to the opener listening on
// handoverName(token).
func handoverSend(fd int, token [tokenSize]byte, deadline time.Time) error {
	c, err := fdpass.Dial(handoverName(token), deadline)
	if err != nil {
		return fmt.Errorf("handing the segment over a unix socket: %w", err)
	}
	defer c.Close()
	if err := fdpass.Send(c, fd); err != nil {
		return fmt.Errorf("handing the segment over a unix socket: %w", err)
	}
	return nil
}
