package shm

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
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
func handoverName(token [tokenSize]byte) string {
	sum := sha256.Sum256(append([]byte("gonccl shm handover "), token[:]...))
	return "@gonccl-shm-" + hex.EncodeToString(sum[:16])
}

// handoverListen starts the opener's side: a listener on handoverName(token).
func handoverListen(token [tokenSize]byte) (*net.UnixListener, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: handoverName(token), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening for the segment on an abstract unix socket: %w", err)
	}
	return l, nil
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
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("the sender's credentials: %w", cerr)
	}
	if int(cred.Uid) != unix.Getuid() {
		return nil, fmt.Errorf("a process of uid %d offered a segment", cred.Uid)
	}
	if err := c.SetDeadline(deadline); err != nil {
		return nil, err
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, fmt.Errorf("receiving the segment: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, fmt.Errorf("receiving the segment: %w", err)
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) == 0 {
		return nil, errors.New("the sender passed no file")
	}
	for _, fd := range fds[1:] {
		unix.Close(fd)
	}
	defer unix.Close(fds[0])
	return mapSegment(fds[0], fmt.Sprintf("the segment handed over (fd %d)", fds[0]), ringSize, token)
}

// handoverSend is the creator's side: it passes fd to the opener listening on
// handoverName(token).
func handoverSend(fd int, token [tokenSize]byte, deadline time.Time) error {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("unix", handoverName(token))
	if err != nil {
		return fmt.Errorf("handing the segment over a unix socket: %w", err)
	}
	defer c.Close()
	if _, _, err := c.(*net.UnixConn).WriteMsgUnix([]byte{0}, unix.UnixRights(fd), nil); err != nil {
		return fmt.Errorf("handing the segment over a unix socket: %w", err)
	}
	return nil
}
