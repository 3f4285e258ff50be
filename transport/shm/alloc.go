package shm

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AllocName is the name every Region's memfd carries (/proc/PID/maps shows
// "/memfd:gonccl-alloc (deleted)" on its mappings).
const AllocName = "gonccl-alloc"

// Region is shared memory handed to a user (goncclMemAlloc, torch's allocate_tensor):
// a memfd mapped MAP_SHARED, whose fd stays open for the region's life so that a
// process on this host can map it through /proc/PID/fd/FD, as the rings are. Every
// live region is in this process's registry (FindRegion), so that a collective on a
// buffer inside one can let its peers read and write the buffer where it lies.
type Region struct {
	Mem []byte // the mapping (outside the Go heap)
	fd  int
	id  uint64 // random: names the region to peers (an fd number is reused after a free)
	ino uint64 // the memfd's inode: a peer checks it maps this very file
}

// The live regions, sorted by address, and how many were ever freed.
var registry struct {
	sync.RWMutex
	byAddr []*Region
}

var regionsFreed atomic.Uint64

// Alloc maps a new region of size bytes (rounded up to whole pages), zeroed, and
// registers it.
func Alloc(size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shared-memory allocation of %d bytes", size)
	}
	page := unix.Getpagesize()
	n := (size + page - 1) / page * page
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate(AllocName, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("sizing a %d-byte shared-memory region: %w", n, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat of a shared-memory region: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mapping a %d-byte shared-memory region: %w", n, err)
	}
	r := &Region{Mem: mem, fd: fd, id: binary.LittleEndian.Uint64(idb[:]), ino: st.Ino}
	registry.Lock()
	i := sort.Search(len(registry.byAddr), func(i int) bool { return registry.byAddr[i].addr() > r.addr() })
	registry.byAddr = slices.Insert(registry.byAddr, i, r)
	registry.Unlock()
	return r, nil
}

func (r *Region) addr() uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(r.Mem))) }

// RegionAt returns the live region that starts at address p, or nil.
func RegionAt(p uintptr) *Region {
	registry.RLock()
	defer registry.RUnlock()
	i := sort.Search(len(registry.byAddr), func(i int) bool { return registry.byAddr[i].addr() >= p })
	if i < len(registry.byAddr) && registry.byAddr[i].addr() == p {
		return registry.byAddr[i]
	}
	return nil
}

// ErrFreed is Free's error for a region freed already.
var ErrFreed = errors.New("shared-memory region freed already")

// Free unmaps the region, closes its memfd and takes it out of the registry; a second
// Free (from any goroutine) returns ErrFreed and does nothing. A peer that mapped the
// region keeps its mapping (and so the memory) until it lets go.
func (r *Region) Free() error {
	registry.Lock()
	i := slices.Index(registry.byAddr, r)
	if i >= 0 {
		registry.byAddr = slices.Delete(registry.byAddr, i, i+1)
	}
	registry.Unlock()
	if i < 0 {
		return ErrFreed
	}
	regionsFreed.Add(1)
	err := unix.Munmap(r.Mem)
	if cerr := unix.Close(r.fd); err == nil {
		err = cerr
	}
	return err
}

// RegionRef says where a buffer lies in a region, for a peer on this host to map it
// (OpenRegion with the owner's pid).
type RegionRef struct {
	ID   uint64 // the region's random id
	FD   int    // its memfd in the owner
	Ino  uint64 // the memfd's inode
	Size int    // the region's size in bytes
	Off  int    // the buffer's byte offset in it
}

// FindRegion reports whether every byte of b lies in one live region of this
// process, and where. An empty b lies nowhere.
func FindRegion(b []byte) (RegionRef, bool) {
	if len(b) == 0 {
		return RegionRef{}, false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	registry.RLock()
	defer registry.RUnlock()
	// The last region starting at or below p.
	i := sort.Search(len(registry.byAddr), func(i int) bool { return registry.byAddr[i].addr() > p }) - 1
	if i < 0 {
		return RegionRef{}, false
	}
	r := registry.byAddr[i]
	off := int(p - r.addr())
	if off >= len(r.Mem) || len(b) > len(r.Mem)-off {
		return RegionRef{}, false
	}
	return RegionRef{ID: r.id, FD: r.fd, Ino: r.ino, Size: len(r.Mem), Off: off}, true
}

// RegionsFreed counts the regions this process has freed so far: a peer that sees it
// change knows some of the regions it mapped may be gone (see core's zero-copy cache).
func RegionsFreed() uint64 { return regionsFreed.Load() }

// RegionAlive reports whether process pid still holds region ref (its fd is still
// that memfd): a peer's mapping of a freed region keeps the memory until unmapped.
func RegionAlive(pid int, ref RegionRef) bool {
	var st unix.Stat_t
	err := unix.Stat(fmt.Sprintf("/proc/%d/fd/%d", pid, ref.FD), &st)
	return err == nil && st.Ino == ref.Ino && st.Size == int64(ref.Size)
}

// PeerRegion is a mapping of a region of another process on this host.
type PeerRegion struct {
	Mem []byte // the whole region (outside the Go heap)
}

// OpenRegion maps the region ref of process pid (same host, same user, through
// /proc/pid/fd), after checking that the file is that region: its size and inode.
func OpenRegion(pid int, ref RegionRef) (*PeerRegion, error) {
	mem, err := mapPeerFile(pid, ref.FD, ref.Size, func(st *unix.Stat_t) error {
		if st.Ino != ref.Ino {
			return fmt.Errorf("inode %d, expected %d: not the peer's shared-memory region", st.Ino, ref.Ino)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &PeerRegion{Mem: mem}, nil
}

// Unmap releases the mapping; Mem must not be used afterwards.
func (p *PeerRegion) Unmap() error {
	err := unix.Munmap(p.Mem)
	p.Mem = nil
	return err
}

// mapPeerFile maps the size-byte file that process pid holds open as fd (same host,
// same user, through /proc/pid/fd) after checking its size, and check's verdict on
// it if check is not nil. The rings' segments, windows and regions are all mapped so.
func mapPeerFile(pid, fd, size int, check func(*unix.Stat_t) error) ([]byte, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(f)
	var st unix.Stat_t
	if err := unix.Fstat(f, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	if st.Size != int64(size) {
		return nil, fmt.Errorf("%s has %d bytes, expected %d: not the peer's", path, st.Size, size)
	}
	if check != nil {
		if err := check(&st); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	mem, err := unix.Mmap(f, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s: %w", path, err)
	}
	return mem, nil
}
