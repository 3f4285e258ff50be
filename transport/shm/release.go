package shm

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ErrBusy means the send ring still holds bytes the peer has not read, so its memory
// cannot be released yet.
var ErrBusy = errors.New("send ring not drained by the peer")

// SendRingBytes is the size of the ring this side produces into: the shared memory
// the link holds for its sends (the peer's ring of the segment is the peer's to count).
func (l *Link) SendRingBytes() int { return len(l.tx.data) }

// ReleaseSend gives the memory behind this side's send ring back to the kernel
// (MADV_REMOVE punches it out of the memfd, for both processes) when the peer has read
// everything sent: the ring's bytes are then dead, and the pages come back, zeroed, on
// the next send. It returns ErrBusy if the peer has not caught up. Only the sending
// goroutine's owner may call it, with no send in progress.
func (l *Link) ReleaseSend() error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.seg == nil {
		return errClosed
	}
	if l.tx.tail.Load() != l.head {
		return fmt.Errorf("shared-memory link to rank %d: %w", l.peer, ErrBusy)
	}
	if err := unix.Madvise(l.tx.data, unix.MADV_REMOVE); err != nil {
		return fmt.Errorf("shared-memory link to rank %d: releasing the send ring: %w", l.peer, err)
	}
	return nil
}
