// Package fdpass passes open files between the processes of one host over abstract
// Unix sockets (SCM_RIGHTS): shared memory segments (transport/shm) and device memory
// exported as a file descriptor (cuda). Abstract names belong to the network
// namespace, so two processes in different PID namespaces (two containers of one pod)
// can still meet, and no file system is shared. A name is derived from a secret only
// the two sides know, and each side checks that the other runs under its own uid
// (SO_PEERCRED). It imports nothing of gonccl's.
package fdpass

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Name is the abstract socket name for secret, in the namespace of purpose (e.g.
// "shm"): "@gonccl-<purpose>-" and a hash of both, which does not reveal the secret.
func Name(purpose string, secret []byte) string {
	sum := sha256.Sum256(append([]byte("gonccl fd passing "+purpose+" "), secret...))
	return "@gonccl-" + purpose + "-" + hex.EncodeToString(sum[:16])
}

// Listen listens on the abstract socket name.
func Listen(name string) (*net.UnixListener, error) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on an abstract unix socket: %w", err)
	}
	return l, nil
}

// Dial connects to the abstract socket name, by deadline.
func Dial(name string, deadline time.Time) (*net.UnixConn, error) {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("unix", name)
	if err != nil {
		return nil, err
	}
	return c.(*net.UnixConn), nil
}

// SameUser checks that the process at the other end of c runs under this process's uid.
func SameUser(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("the other process's credentials: %w", cerr)
	}
	if int(cred.Uid) != unix.Getuid() {
		return fmt.Errorf("a process of uid %d is at the other end", cred.Uid)
	}
	return nil
}

// Send passes fd (the caller keeps its own) over c, with one byte of data.
func Send(c *net.UnixConn, fd int) error {
	_, _, err := c.WriteMsgUnix([]byte{0}, unix.UnixRights(fd), nil)
	return err
}

// Receive reads one file passed over c by a process of this uid, by deadline. The
// caller owns the returned fd; extra files passed along are closed.
func Receive(c *net.UnixConn, deadline time.Time) (int, error) {
	if err := SameUser(c); err != nil {
		return -1, err
	}
	if err := c.SetDeadline(deadline); err != nil {
		return -1, err
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, err
	}
	var fds []int
	for _, m := range msgs {
		got, err := unix.ParseUnixRights(&m)
		if err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) == 0 {
		return -1, errors.New("the sender passed no file")
	}
	for _, fd := range fds[1:] {
		_ = unix.Close(fd)
	}
	return fds[0], nil
}

// Server hands one file to every process of this uid that connects to its name,
// until closed: the exporter's side of a file many peers fetch (Fetch).
type Server struct {
	l    *net.UnixListener
	fd   int
	done chan struct{}
}

// Serve starts handing fd (a duplicate of it: the caller keeps its own) to whoever
// connects to name.
func Serve(name string, fd int) (*Server, error) {
	l, err := Listen(name)
	if err != nil {
		return nil, err
	}
	own, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("duplicating the file to hand out: %w", err)
	}
	s := &Server{l: l, fd: own, done: make(chan struct{})}
	go s.run()
	return s, nil
}

func (s *Server) run() {
	defer close(s.done)
	for {
		c, err := s.l.AcceptUnix()
		if err != nil {
			return // closed
		}
		if SameUser(c) == nil {
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			_ = Send(c, s.fd)
		}
		c.Close()
	}
}

// Close stops handing the file out and closes the server's copy of it.
func (s *Server) Close() {
	s.l.Close()
	<-s.done
	_ = unix.Close(s.fd)
}

// Fetch connects to a Server's name and returns the file it hands out, by deadline.
// A server not (yet) listening is retried until the deadline.
func Fetch(name string, deadline time.Time) (int, error) {
	for {
		c, err := Dial(name, deadline)
		if err == nil {
			fd, err := Receive(c, deadline)
			c.Close()
			return fd, err
		}
		if time.Now().Add(10 * time.Millisecond).After(deadline) {
			return -1, fmt.Errorf("fetching a file over an abstract unix socket: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
