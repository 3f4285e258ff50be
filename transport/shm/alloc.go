package shm

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// AllocName is the name every Region's memfd carries (/proc/PID/maps shows
// "/memfd:gonccl-alloc (deleted)" on its mappings).
const AllocName = "gonccl-alloc"

// Region is shared memory handed to a user (goncclMemAlloc, torch's allocate_tensor):
// a memfd mapped MAP_SHARED, whose fd stays open for the region's life so that a
// process on this host can map it through /proc/PID/fd/FD, as the rings are.
type Region struct {
	Mem []byte // the mapping (outside the Go heap)
	fd  int
}

// Alloc maps a new region of size bytes (rounded up to whole pages), zeroed.
func Alloc(size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shared-memory allocation of %d bytes", size)
	}
	page := unix.Getpagesize()
	n := (size + page - 1) / page * page
	fd, err := unix.MemfdCreate(AllocName, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sizing a %d-byte shared-memory region: %w", n, err)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mapping a %d-byte shared-memory region: %w", n, err)
	}
	return &Region{Mem: mem, fd: fd}, nil
}

// Free unmaps the region and closes its memfd.
func (r *Region) Free() error {
	err := unix.Munmap(r.Mem)
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	r.Mem = nil
	return err
}
