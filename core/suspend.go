package core

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/transport/shm"
)

// Suspend and resume: a communicator that will sit idle for a while (a training job
// between phases, a process handing its memory to something else) gives back the
// memory it holds without giving up its peers. Suspend waits until no operation is
// queued or running, then unmaps its scratch and work memory and punches the pages
// of its shared-memory send rings out of their segments (shm.Link.ReleaseSend); its
// connections stay. Operations issued while suspended fail with ErrSuspended. Resume
// maps scratch memory again; rings come back page by page as they are written.

// ErrSuspended is the error of an operation issued on a suspended communicator.
var ErrSuspended = fmt.Errorf("%w: the communicator is suspended (resume it first)", ErrInvalidArgument)

// MemoryStats is what a communicator holds, in bytes, by kind.
type MemoryStats struct {
	Scratch int64 // receive staging for reductions (mmap'd)
	Work    int64 // work memory, grown on demand by the algorithms that need it
	ShmRing int64 // shared-memory send rings of this rank's links, not released
}

// Suspended reports whether the communicator is suspended.
func (c *Comm) Suspended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.suspended
}

// Suspend stops the communicator from taking operations and frees its memory (see
// above). It waits up to the communicator's timeout for the operations issued before
// it to finish and for peers to read what was sent to them; on a timeout the
// communicator stays usable and keeps its memory. Suspending a suspended
// communicator fails.
func (c *Comm) Suspend() error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return fmt.Errorf("gonccl rank %d: suspend: %w", c.rank, ErrClosed)
	case c.suspended:
		c.mu.Unlock()
		return fmt.Errorf("gonccl rank %d: suspend: %w", c.rank, ErrSuspended)
	}
	c.suspended = true
	timeout := c.timeout
	c.mu.Unlock()
	deadline := time.Now().Add(timeout)
	for {
		done, err := c.releaseIfIdle()
		if done {
			return err
		}
		if time.Now().After(deadline) {
			c.mu.Lock()
			c.suspended = false
			c.mu.Unlock()
			return &OpError{Rank: c.rank, Op: "suspend", Peer: -1, Err: fmt.Errorf(
				"%w after %v waiting for the operations issued before suspend to finish and the peers to read them",
				ErrTimeout, timeout)}
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// releaseIfIdle frees the memory if no operation is queued or running and every send
// ring is drained (done); it holds runMu meanwhile, so nothing starts.
func (c *Comm) releaseIfIdle() (done bool, err error) {
	if !c.runMu.TryLock() {
		return false, nil
	}
	defer c.runMu.Unlock()
	c.mu.Lock()
	idle := c.running == nil && len(c.queue) == 0
	c.mu.Unlock()
	if !idle {
		return false, nil
	}
	links := c.shmLinks()
	for _, l := range links {
		if err := l.ReleaseSend(); errors.Is(err, shm.ErrBusy) {
			return false, nil
		} else if err != nil {
			return true, c.unsuspend(fmt.Errorf("gonccl rank %d: suspend: %w", c.rank, err))
		}
	}
	c.released = true
	return true, c.freeScratch()
}

// unsuspend clears the flag after a failed suspend and returns err.
func (c *Comm) unsuspend(err error) error {
	c.mu.Lock()
	c.suspended = false
	c.mu.Unlock()
	return err
}

// Resume maps the scratch memory again and takes operations again. Resuming a
// communicator that is not suspended fails.
func (c *Comm) Resume() error {
	c.runMu.Lock() // runMu before mu, as the runners take them
	defer c.runMu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("gonccl rank %d: resume: %w", c.rank, ErrClosed)
	}
	if !c.suspended {
		return fmt.Errorf("%w: gonccl rank %d: resume: the communicator is not suspended", ErrInvalidArgument, c.rank)
	}
	if c.released {
		scratch, err := unix.Mmap(-1, 0, c.scratchBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return fmt.Errorf("gonccl rank %d: resume: allocating %d bytes of scratch memory: %w", c.rank, c.scratchBytes, err)
		}
		c.scratch, c.released = scratch, false
	}
	c.suspended = false
	return nil
}

// Memory reports what the communicator holds now.
func (c *Comm) Memory() MemoryStats {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	s := MemoryStats{Scratch: int64(len(c.scratch)), Work: int64(len(c.work))}
	if !c.released {
		for _, l := range c.shmLinks() {
			s.ShmRing += int64(l.SendRingBytes())
		}
	}
	return s
}

// shmLinks are the communicator's shared-memory links made so far.
func (c *Comm) shmLinks() []*shm.Link {
	var ls []*shm.Link
	for p := range c.peers.slots {
		if l, ok := c.peers.linkIfAny(p).(*shm.Link); ok {
			ls = append(ls, l)
		}
	}
	return ls
}
