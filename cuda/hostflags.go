package cuda

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/internal/cenv"
)

// The flags of the device path live in host memory that the GPU maps, not in device
// memory: each rank's flag region (its header, then its point-to-point flags) is a
// memfd, mapped into every rank of the host (a peer opens it through
// /proc/<pid>/fd/<fd>) and registered with cuMemHostRegister, so that the streams
// write and wait on it with stream memory operations like device memory, and the host
// reads and writes it with plain loads and stores.
//
// The host writing it is what lets a rank release its own waiting streams (devfault.go):
// a release written by an operation on a stream could queue behind the very wait it
// must release, since the streams of a context share CUDA_DEVICE_MAX_CONNECTIONS
// hardware queues (8 by default, 1 in Megatron-style training), in each of which a
// waiting operation holds back everything queued behind it. Reading the flags for a
// diagnosis needs no stream either.

// hostRegPortable|hostRegDeviceMap: CU_MEMHOSTREGISTER_PORTABLE (every context) and
// CU_MEMHOSTREGISTER_DEVICEMAP (a device address for it).
const hostRegFlags = 0x1 | 0x2

// flagRegion is one rank's flag region as this process maps it.
type flagRegion struct {
	host []byte  // the host mapping
	dev  uintptr // its device address (cuMemHostGetDevicePointer)
	fd   int     // the memfd, for the region this rank made; -1 otherwise
}

// abortBytes is the room of the abort word after the point-to-point flags.
const abortBytes = 256

// flagRegionBytes is the size of a flag region of nranks ranks, in whole pages: the
// header, the point-to-point flags, then the abort word (shared.go's abortWord).
func flagRegionBytes(hdr, nranks int) int {
	page := unix.Getpagesize()
	return (hdr + p2pFlagsBytes(nranks) + abortBytes + page - 1) &^ (page - 1)
}

// newFlagRegion makes this rank's zeroed flag region of n bytes and registers it.
// Context current.
func newFlagRegion(d *Driver, n int) (flagRegion, error) {
	fd, err := unix.MemfdCreate("gonccl-device-flags", 0)
	if err != nil {
		return flagRegion{fd: -1}, fmt.Errorf("cuda: memfd_create for the device flags: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		_ = unix.Close(fd)
		return flagRegion{fd: -1}, fmt.Errorf("cuda: sizing the device flags' memfd: %w", err)
	}
	r, err := mapFlagRegion(d, fd, n)
	if err != nil {
		_ = unix.Close(fd)
		return flagRegion{fd: -1}, err
	}
	r.fd = fd
	return r, nil
}

// openFlagRegion maps and registers the flag region of process pid's memfd fd.
// Context current.
func openFlagRegion(d *Driver, pid, fd, n int) (flagRegion, error) {
	path := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
	f, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return flagRegion{fd: -1}, fmt.Errorf("cuda: opening a peer's device flags (%s): %w", path, err)
	}
	defer unix.Close(f)
	return mapFlagRegion(d, f, n)
}

func mapFlagRegion(d *Driver, fd, n int) (flagRegion, error) {
	host, err := unix.Mmap(fd, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return flagRegion{fd: -1}, fmt.Errorf("cuda: mapping the device flags: %w", err)
	}
	p := unsafe.Pointer(&host[0])
	if err := d.HostRegister(p, n, hostRegFlags); err != nil {
		_ = unix.Munmap(host)
		return flagRegion{fd: -1}, err
	}
	dev, err := d.HostDevicePointer(p)
	if err != nil {
		_ = d.HostUnregister(p)
		_ = unix.Munmap(host)
		return flagRegion{fd: -1}, err
	}
	return flagRegion{host: host, dev: dev, fd: -1}, nil
}

// close unregisters and unmaps the region (and closes its memfd). Context current.
func (r *flagRegion) close(d *Driver) error {
	var err error
	if r.host != nil {
		err = d.HostUnregister(unsafe.Pointer(&r.host[0]))
		if uerr := unix.Munmap(r.host); err == nil {
			err = uerr
		}
		r.host = nil
	}
	if r.fd >= 0 {
		_ = unix.Close(r.fd)
		r.fd = -1
	}
	return err
}

// ownWord is the host address of the word of this rank's flag region at device
// address addr (one of s.flag's, or of this rank's point-to-point flags).
func (s *Shared) ownWord(addr uintptr) *uint32 {
	off := addr - s.flags[s.rank].dev
	if off+4 > uintptr(len(s.flags[s.rank].host)) {
		panic(fmt.Sprintf("cuda: %#x is not in this rank's flag region", addr))
	}
	return (*uint32)(unsafe.Pointer(&s.flags[s.rank].host[off]))
}

// storeOwn writes v into the word of this rank's flag region at device address addr,
// from the host.
func (s *Shared) storeOwn(addr uintptr, v uint32) { atomic.StoreUint32(s.ownWord(addr), v) }

// loadOwn reads n bytes at off of this rank's flag region as words.
func (s *Shared) loadOwn(off, n int) []uint32 {
	words := make([]uint32, n/4)
	base := s.flags[s.rank].dev + uintptr(off)
	for i := range words {
		words[i] = atomic.LoadUint32(s.ownWord(base + uintptr(4*i)))
	}
	return words
}

// HardwareQueues says how many hardware queues (connections) the driver gives each
// context's streams, CUDA_DEVICE_MAX_CONNECTIONS (default 8), for the INIT log: with
// fewer queues more streams wait behind each other's memory waits, which the device
// path's host-written flags keep from ever deadlocking a release.
func HardwareQueues() string {
	n := hardwareQueueCount()
	v, set := cenv.Lookup("CUDA_DEVICE_MAX_CONNECTIONS")
	if !set || v == "" {
		return "8 hardware queues per context (CUDA_DEVICE_MAX_CONNECTIONS unset)"
	}
	if c, err := strconv.Atoi(v); err == nil && c > 0 {
		return fmt.Sprintf("%d hardware queue(s) per context (CUDA_DEVICE_MAX_CONNECTIONS=%d)", n, c)
	}
	return fmt.Sprintf("CUDA_DEVICE_MAX_CONNECTIONS=%q (not a count: the driver's default, 8, applies)", v)
}

// hardwareQueueCount is the number of hardware queues the driver gives each context's
// streams: CUDA_DEVICE_MAX_CONNECTIONS, 1 to 32, 8 when unset or not a count.
func hardwareQueueCount() int {
	v, _ := cenv.Lookup("CUDA_DEVICE_MAX_CONNECTIONS")
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return min(n, 32)
	}
	return 8
}
