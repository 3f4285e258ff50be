package core

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// workBuf returns n bytes of the communicator's work memory: staging that outlives
// one chunk (reduce partials in flight, an all-to-all's copy of an overlapping send
// buffer). It lives outside the Go heap, grows as needed and is reused by later
// operations; Destroy and Abort free it. Only the executor calls it.
func (c *Comm) workBuf(n int) ([]byte, error) {
	if n <= len(c.work) {
		return c.work[:n], nil
	}
	size := max(n, 2*len(c.work), 1<<16)
	size = ceilDiv(size, unix.Getpagesize()) * unix.Getpagesize()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("allocating %d bytes of work memory: %w", size, err)
	}
	if err := c.freeWork(); err != nil {
		_ = unix.Munmap(b)
		return nil, err
	}
	c.work = b
	return b[:n], nil
}

// freeWork unmaps the work memory, if there is any; the communicator's teardown
// calls it.
func (c *Comm) freeWork() error {
	if c.work == nil {
		return nil
	}
	err := unix.Munmap(c.work)
	c.work = nil
	return err
}

// overlaps reports whether a and b share any byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
