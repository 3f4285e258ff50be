package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/internal/safego"
)

// ErrUnavailable means shared memory could not be set up between the pair (no memfd,
// neither the peer's /proc nor a unix socket to hand the segment over, ...). The connection is
// still in step and usable, so the caller keeps using it as a TCP link.
var ErrUnavailable = errors.New("shared memory unavailable")

// How the segment gets from one process to the other. The creator makes a memfd and
// sends, over the pair's already authenticated connection, its pid, the fd number, the
// ring size and a random token; the opener opens /proc/<pid>/fd/<fd> (same host, same
// user: the kernel allows it), maps it, checks the token in the segment and answers;
// then both close their fds. A memfd has no name anywhere, so nothing can leak: the
// kernel frees it when the last mapping goes, whether the ranks close or die, at any
// point of the setup. (A named file in /dev/shm would outlive a rank killed between
// creating and unlinking it.) When /proc/<pid> cannot be opened or is another process
// (the ranks are in different pid namespaces), the opener asks for the segment over an
// abstract Unix socket instead (handover.go) and answers again once it has it or not;
// if that fails too, the pair keeps TCP.
const (
	setupMagic = 0x48534e47 // "GNSH"
	offerSize  = 4 + 4 + 4 + 4 + 8 + tokenSize
	answerSize = 8
)

// Connect sets up a shared-memory Link to peer over conn, the pair's established and
// authenticated connection: the side with create set makes the segment, the other
// opens it. The Link then owns conn and keeps it open as the liveness channel (its EOF
// means the peer closed or died). An error wrapping ErrUnavailable leaves conn usable
// and owned by the caller; any other error means conn is out of step. guard (at most
// one) sets how the link's goroutine reports a panic (see package safego); without it a
// panic is still recovered, and fails the link.
func Connect(conn net.Conn, peer int, create bool, ringSize int, deadline time.Time, guard ...safego.Guard) (*Link, error) {
	if ringSize < 64 || ringSize&(ringSize-1) != 0 {
		return nil, fmt.Errorf("%w: ring size %d is not a power of two >= 64", ErrUnavailable, ringSize)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	var seg *segment
	var err error
	side := 0
	if create {
		seg, err = offer(conn, peer, uint64(ringSize), deadline)
	} else {
		side = 1
		seg, err = accept(conn, peer, uint64(ringSize), deadline)
	}
	if err == nil {
		err = conn.SetDeadline(time.Time{})
	}
	if err != nil {
		return nil, failSetup(seg, err)
	}
	var g safego.Guard
	if len(guard) > 0 {
		g = guard[0]
	}
	return newLink(peer, side, seg, conn, g), nil
}

// offer creates the segment and hands it to the peer.
func offer(conn net.Conn, peer int, ringSize uint64, deadline time.Time) (*segment, error) {
	var msg [offerSize]byte
	binary.LittleEndian.PutUint32(msg[0:], setupMagic)
	seg, fd, token, cerr := createSegment(ringSize)
	if cerr != nil {
		binary.LittleEndian.PutUint32(msg[4:], 1)
	} else {
		defer unix.Close(fd)
		binary.LittleEndian.PutUint32(msg[8:], uint32(os.Getpid()))
		binary.LittleEndian.PutUint32(msg[12:], uint32(fd))
		binary.LittleEndian.PutUint64(msg[16:], ringSize)
		copy(msg[24:], token[:])
	}
	if _, err := conn.Write(msg[:]); err != nil {
		return nil, failSetup(seg, fmt.Errorf("offering shared memory to rank %d: %w", peer, err))
	}
	if cerr != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, cerr)
	}
	var ans [answerSize]byte
	if _, err := io.ReadFull(conn, ans[:]); err != nil {
		return nil, failSetup(seg, fmt.Errorf("waiting for rank %d to map shared memory: %w", peer, err))
	}
	if binary.LittleEndian.Uint32(ans[0:]) != setupMagic {
		return nil, failSetup(seg, fmt.Errorf("rank %d answered the shared-memory offer with garbage", peer))
	}
	var herr error
	if binary.LittleEndian.Uint32(ans[4:]) == answerHandover {
		// The peer could not open it through /proc and waits for it on a unix socket;
		// its second answer says whether it got it (also when this send failed).
		herr = handoverSend(fd, token, handoverDeadline(deadline))
		if _, err := io.ReadFull(conn, ans[:]); err != nil {
			return nil, failSetup(seg, fmt.Errorf("waiting for rank %d to map shared memory handed over: %w", peer, err))
		}
	}
	if binary.LittleEndian.Uint32(ans[4:]) != 0 {
		if herr != nil {
			return nil, failSetup(seg, fmt.Errorf("%w: rank %d could not map this rank's segment (%v)", ErrUnavailable, peer, herr))
		}
		return nil, failSetup(seg, fmt.Errorf("%w: rank %d could not map this rank's segment", ErrUnavailable, peer))
	}
	return seg, nil
}

// accept maps the segment the peer offers.
func accept(conn net.Conn, peer int, ringSize uint64, deadline time.Time) (*segment, error) {
	var msg [offerSize]byte
	if _, err := io.ReadFull(conn, msg[:]); err != nil {
		return nil, fmt.Errorf("waiting for rank %d's shared-memory offer: %w", peer, err)
	}
	if binary.LittleEndian.Uint32(msg[0:]) != setupMagic {
		return nil, fmt.Errorf("rank %d sent garbage instead of a shared-memory offer", peer)
	}
	if binary.LittleEndian.Uint32(msg[4:]) != 0 {
		return nil, fmt.Errorf("%w: rank %d could not create a segment", ErrUnavailable, peer)
	}
	var seg *segment
	oerr := fmt.Errorf("rank %d offers %d-byte rings, this rank wants %d", peer, binary.LittleEndian.Uint64(msg[16:]), ringSize)
	if binary.LittleEndian.Uint64(msg[16:]) == ringSize {
		seg, oerr = openSegment(int(binary.LittleEndian.Uint32(msg[8:])), int(binary.LittleEndian.Uint32(msg[12:])),
			ringSize, [tokenSize]byte(msg[24:24+tokenSize]))
	}
	var ans [answerSize]byte
	binary.LittleEndian.PutUint32(ans[0:], setupMagic)
	if oerr != nil && binary.LittleEndian.Uint64(msg[16:]) == ringSize {
		token := [tokenSize]byte(msg[24 : 24+tokenSize])
		if l, lerr := handoverListen(token); lerr != nil {
			oerr = fmt.Errorf("%v; %v", oerr, lerr)
		} else {
			binary.LittleEndian.PutUint32(ans[4:], answerHandover)
			_, werr := conn.Write(ans[:])
			if werr == nil {
				var herr error
				seg, herr = handoverReceive(l, ringSize, token, handoverDeadline(deadline))
				if herr == nil {
					oerr = nil
				} else {
					oerr = fmt.Errorf("%v; %v", oerr, herr)
				}
			}
			l.Close()
			if werr != nil {
				return nil, fmt.Errorf("answering rank %d's shared-memory offer: %w", peer, werr)
			}
		}
	}
	binary.LittleEndian.PutUint32(ans[4:], 0)
	if oerr != nil {
		binary.LittleEndian.PutUint32(ans[4:], 1)
	}
	if _, err := conn.Write(ans[:]); err != nil {
		return nil, failSetup(seg, fmt.Errorf("answering rank %d's shared-memory offer: %w", peer, err))
	}
	if oerr != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, oerr)
	}
	return seg, nil
}

// handoverDeadline bounds the wait for a segment handed over a unix socket: a few
// seconds, not the whole of init's time, since a pair that gets that far is in one
// network namespace and the creator sends at once.
func handoverDeadline(deadline time.Time) time.Time {
	if d := time.Now().Add(5 * time.Second); d.Before(deadline) {
		return d
	}
	return deadline
}

// failSetup unmaps seg (if any) and returns err.
func failSetup(seg *segment, err error) error {
	if seg != nil {
		_ = seg.unmap()
	}
	return err
}
