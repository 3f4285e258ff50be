package cuda

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gonccl/gonccl/internal/fdpass"
)

// The device path's scratch is memory that outlives the rank that made it: a rank
// makes it with cuMemCreate (driver.MemCreateExported), exported as a POSIX file
// descriptor, and hands the descriptor out over an abstract Unix socket (fdpass) whose
// name derives from a secret in its exchange record; every rank of another process
// fetches it there (SCM_RIGHTS) and maps it (driver.MemImportFD). The memory is freed
// only once every rank that maps it has unmapped it, so a survivor's stream that still
// reads a dead peer's scratch reads memory that is there (memory of cuMemAlloc shared
// with cuIpcOpenMemHandle goes with its exporter, and the read faults, sticky, taking
// the survivor's context with it).

// scratchMagic starts the handle field of an exchange record for such memory.
const scratchMagic = 0x53564d47 // "GMVS"

const scratchSecretBytes = 32

// scratchFetchTimeout bounds the wait for a peer's scratch descriptor: the peer
// serves it from before the exchange in which this rank learnt its name.
const scratchFetchTimeout = 30 * time.Second

// exportScratch makes this rank's scratch of at least n bytes (s.own, s.ownSize),
// starts serving its descriptor, and returns the handle field of its record. Context
// current.
func (s *Shared) exportScratch(n int) (h [ipcHandleSize]byte, err error) {
	if err := s.d.VMMSupported(s.dev); err != nil {
		return h, err
	}
	e, err := s.d.MemCreateExported(s.dev, n)
	if err != nil {
		return h, err
	}
	defer unix.Close(e.FD)
	s.own, s.ownSize = e.Ptr, e.Size
	var secret [scratchSecretBytes]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return h, fmt.Errorf("cuda: no randomness for the scratch's socket name: %w", err)
	}
	if s.server, err = fdpass.Serve(fdpass.Name("cuda-scratch", secret[:]), e.FD); err != nil {
		return h, err
	}
	binary.LittleEndian.PutUint32(h[0:], scratchMagic)
	binary.LittleEndian.PutUint64(h[8:], uint64(e.Size))
	copy(h[16:], secret[:])
	return h, nil
}

// importScratch fetches and maps the scratch a peer's record's handle field names
// and returns its address here and its size. Context current.
func (s *Shared) importScratch(h [ipcHandleSize]byte) (uintptr, int, error) {
	if binary.LittleEndian.Uint32(h[0:]) != scratchMagic {
		return 0, 0, fmt.Errorf("cuda: the peer's scratch record names no shareable memory")
	}
	n := int(binary.LittleEndian.Uint64(h[8:]))
	fd, err := fdpass.Fetch(fdpass.Name("cuda-scratch", h[16:16+scratchSecretBytes]), time.Now().Add(scratchFetchTimeout))
	if err != nil {
		return 0, 0, fmt.Errorf("fetching its scratch: %w", err)
	}
	defer unix.Close(fd)
	p, err := s.d.MemImportFD(fd, n, s.dev)
	return p, n, err
}

// grantScratch gives this rank's device access to the scratch another rank of this
// process made on its own device, at p, as its record's handle field h describes it.
// Context current.
func (s *Shared) grantScratch(p uintptr, h [ipcHandleSize]byte) error {
	if binary.LittleEndian.Uint32(h[0:]) != scratchMagic {
		return fmt.Errorf("cuda: the peer's scratch record names no shareable memory")
	}
	return s.d.MemGrantAccess(p, int(binary.LittleEndian.Uint64(h[8:])), s.dev)
}

// stopServing stops handing this rank's scratch descriptor out (NewShared's end).
func (s *Shared) stopServing() {
	if s.server != nil {
		s.server.Close()
		s.server = nil
	}
}
