package cuda

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/fdpass"
)

// Device memory that outlives the rank that made it, for every buffer a peer process
// maps: the device path's scratch and the same-GPU path's exchange buffers. A rank
// makes it with cuMemCreate (driver.MemCreateExported), exported as a POSIX file
// descriptor, and hands the descriptor out over an abstract Unix socket (fdpass)
// whose name derives from a secret in a 64-byte handle it publishes (ExportMem); a
// rank of another process fetches it there (SCM_RIGHTS) and maps it (ImportMem,
// driver.MemImportFD). The memory is freed only once every rank that maps it has
// unmapped it, so a survivor's stream that still reads or writes a dead peer's buffer
// finds memory that is there (memory of cuMemAlloc shared with cuIpcOpenMemHandle
// goes with its exporter, and the access faults, sticky, taking the survivor's context
// with it).

// sharedMemMagic starts a handle that names such memory.
const sharedMemMagic = 0x53564d47 // "GMVS"

const sharedMemSecretBytes = 32

// SharedMemHandleSize is the size of the handle that names shared memory (that of a
// CUDA IPC handle, so either fits the same record field).
const SharedMemHandleSize = ipcHandleSize

// sharedMemFetchTimeout bounds the wait for a peer's descriptor: the peer serves it
// from before it published the handle this rank learnt it from.
const sharedMemFetchTimeout = 30 * time.Second

// SharedMem is this rank's memory that peers of other processes map (ExportMem).
type SharedMem struct {
	Ptr    uintptr // mapped here, with read and write access for the device
	Size   int     // bytes mapped (a multiple of the device's granularity)
	Handle [SharedMemHandleSize]byte
	server *fdpass.Server
}

// ExportMem makes at least n bytes of device memory on dev that peers can map
// (ImportMem), and starts serving its descriptor to processes of this uid that know
// Handle; purpose names the socket's namespace ("cuda-scratch"). It fails, wrapping
// driver.ErrNoVMM with the reason, where the driver or device cannot share memory as
// file descriptors. The context of dev is current.
func ExportMem(d *driver.Driver, dev, n int, purpose string) (*SharedMem, error) {
	if err := d.VMMSupported(dev); err != nil {
		return nil, err
	}
	var secret [sharedMemSecretBytes]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return nil, fmt.Errorf("cuda: no randomness for a shared buffer's socket name: %w", err)
	}
	e, err := d.MemCreateExported(dev, n)
	if err != nil {
		return nil, err
	}
	defer unix.Close(e.FD)
	m := &SharedMem{Ptr: e.Ptr, Size: e.Size}
	if m.server, err = fdpass.Serve(fdpass.Name(purpose, secret[:]), e.FD); err != nil {
		_ = d.MemUnmapShared(e.Ptr, e.Size)
		return nil, err
	}
	binary.LittleEndian.PutUint32(m.Handle[0:], sharedMemMagic)
	binary.LittleEndian.PutUint64(m.Handle[8:], uint64(e.Size))
	copy(m.Handle[16:], secret[:])
	copy(m.Handle[16+sharedMemSecretBytes:], purpose) // ImportMem needs it for the name
	return m, nil
}

// StopServing stops handing the descriptor out: peers that have not fetched it by
// now cannot map the memory. The mappings (this one and the peers') are unaffected.
func (m *SharedMem) StopServing() {
	if m != nil && m.server != nil {
		m.server.Close()
		m.server = nil
	}
}

// Free stops serving and unmaps this rank's mapping; the memory itself is freed once
// no peer maps it either. Context current.
func (m *SharedMem) Free(d *driver.Driver) error {
	m.StopServing()
	if m.Ptr == 0 {
		return nil
	}
	err := d.MemUnmapShared(m.Ptr, m.Size)
	m.Ptr = 0
	return err
}

// IsSharedMem says whether h names memory of ExportMem (rather than, say, a CUDA IPC
// handle).
func IsSharedMem(h [SharedMemHandleSize]byte) bool {
	return binary.LittleEndian.Uint32(h[0:]) == sharedMemMagic
}

// SharedMemSize is the size of the memory handle h names.
func SharedMemSize(h [SharedMemHandleSize]byte) int { return int(binary.LittleEndian.Uint64(h[8:])) }

// ImportMem fetches the descriptor of the memory a peer's handle h names and maps it
// with read and write access for dev; it returns its address here and its size,
// which driver.MemUnmapShared takes back. Context current.
func ImportMem(d *driver.Driver, dev int, h [SharedMemHandleSize]byte) (uintptr, int, error) {
	if !IsSharedMem(h) {
		return 0, 0, fmt.Errorf("cuda: the peer's record names no shareable memory")
	}
	n := SharedMemSize(h)
	purpose := driver.NulTerminated(h[16+sharedMemSecretBytes:])
	fd, err := fdpass.Fetch(fdpass.Name(purpose, h[16:16+sharedMemSecretBytes]), time.Now().Add(sharedMemFetchTimeout))
	if err != nil {
		return 0, 0, fmt.Errorf("fetching its shared memory: %w", err)
	}
	defer unix.Close(fd)
	p, err := d.MemImportFD(fd, n, dev)
	return p, n, err
}

// exportScratch makes this rank's scratch of at least n bytes (s.own, s.ownSize),
// starts serving its descriptor, and returns the handle field of its record. Context
// current.
func (s *Shared) exportScratch(n int) (h [ipcHandleSize]byte, err error) {
	m, err := ExportMem(s.d, s.dev, n, "cuda-scratch")
	if err != nil {
		return h, err
	}
	s.own, s.ownSize, s.server = m.Ptr, m.Size, m
	return m.Handle, nil
}

// importScratch fetches and maps the scratch a peer's record's handle field names
// and returns its address here and its size. Context current.
func (s *Shared) importScratch(h [ipcHandleSize]byte) (uintptr, int, error) {
	return ImportMem(s.d, s.dev, h)
}

// grantScratch gives this rank's device access to the scratch another rank of this
// process made on its own device, at p, as its record's handle field h describes it.
// Context current.
func (s *Shared) grantScratch(p uintptr, h [ipcHandleSize]byte) error {
	if !IsSharedMem(h) {
		return fmt.Errorf("cuda: the peer's scratch record names no shareable memory")
	}
	return s.d.MemGrantAccess(p, SharedMemSize(h), s.dev)
}

// stopServing stops handing this rank's scratch descriptor out (NewShared's end).
func (s *Shared) stopServing() {
	s.server.StopServing()
	s.server = nil
}
