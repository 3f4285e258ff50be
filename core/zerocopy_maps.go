package core

import (
	"fmt"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
)

// The peers' regions a communicator has mapped for the zero-copy collectives
// (zerocopy.go): mapped once, kept while their owner holds them, and let go when the
// owner frees them, when there are too many, or when the communicator ends.

// zcState is a communicator's zero-copy state: the peers' regions it has mapped and
// the descriptors' buffers. Only the runner of operations uses it (one at a time);
// freeScratch lets go of it.
type zcState struct {
	maps  map[zcKey]*zcMap
	frees []uint64 // per rank: its RegionsFreed when this rank last looked
	seen  []bool   // per rank: frees holds a value
	use   uint64   // operations run, for least-recently-used eviction
	mine  []byte   // this rank's descriptor
	all   []byte   // every rank's
	// owed: the ranks whose done messages the last operation did not wait for (test
	// fault skip-done); the next operation receives them first (their header is
	// owedHdr).
	owed    []int
	owedHdr transport.Header
	// learned: what the communicator knows of each kind of candidate operation
	// (zerocopy_learn.go); asks: describe steps run (tests read it).
	learned zcLearned
	asks    uint64
}

type zcKey struct {
	rank int
	id   uint64
}

type zcMap struct {
	r    *shm.PeerRegion
	pid  int
	ref  shm.RegionRef
	used uint64
}

func (c *Comm) zcState() *zcState {
	if c.zc == nil {
		c.zc = &zcState{maps: map[zcKey]*zcMap{}, frees: make([]uint64, c.nranks), seen: make([]bool, c.nranks),
			mine: make([]byte, zcDescBytes), all: make([]byte, c.nranks*zcDescBytes)}
	}
	return c.zc
}

// zcMap maps (or finds mapped) the peers' buffers that this rank touches in o.
func (c *Comm) zcMap(o *op, descs []zcDesc) (zcBufs, error) {
	z := c.zc
	z.use++
	z.evict(descs, o)
	n := c.nranks
	b := zcBufs{send: make([][]byte, n), recv: make([][]byte, n)}
	b.send[c.rank], b.recv[c.rank] = c.zcExtents(o)
	sendLen, recvLen := c.zcLens(o)
	for p, d := range descs {
		if p == c.rank {
			continue
		}
		useSend, useRecv := zcUses(o, p)
		if o.kind == KindBroadcast && c.rank == o.root {
			useSend = false // the root reads nobody's
		}
		var err error
		if useSend {
			if b.send[p], err = z.mapped(p, d.pid, d.send.ref, sendLen); err != nil {
				return b, c.zcMapErr(p, err)
			}
		}
		if useRecv {
			if b.recv[p], err = z.mapped(p, d.pid, d.recv.ref, recvLen); err != nil {
				return b, c.zcMapErr(p, err)
			}
		}
	}
	return b, nil
}

func (c *Comm) zcMapErr(p int, err error) error {
	return fmt.Errorf("zero-copy: cannot map rank %d's buffer in shared memory (GONCCL_ZEROCOPY=0 on every rank turns the path off): %w", p, err)
}

// mapped returns n bytes of rank's region ref, mapping the region on first use.
func (z *zcState) mapped(rank, pid int, ref shm.RegionRef, n int) ([]byte, error) {
	if ref.Off < 0 || n > ref.Size-ref.Off {
		return nil, fmt.Errorf("bytes [%d, %d) are not inside its region of %d bytes", ref.Off, ref.Off+n, ref.Size)
	}
	k := zcKey{rank, ref.ID}
	m := z.maps[k]
	if m == nil {
		r, err := shm.OpenRegion(pid, ref)
		if err != nil {
			return nil, err
		}
		m = &zcMap{r: r, pid: pid, ref: ref}
		z.maps[k] = m
	}
	m.used = z.use
	return m.r.Mem[ref.Off : ref.Off+n : ref.Off+n], nil
}

// evict unmaps the regions that their owner freed (keeping them mapped would keep
// their memory), checked for each rank that freed any since this rank last looked,
// and then the least recently used beyond zcMaxMaps; never one this operation uses.
func (z *zcState) evict(descs []zcDesc, o *op) {
	inUse := map[zcKey]bool{}
	for p, d := range descs {
		if d.send.shared {
			inUse[zcKey{p, d.send.ref.ID}] = true
		}
		if d.recv.shared {
			inUse[zcKey{p, d.recv.ref.ID}] = true
		}
	}
	for p, d := range descs {
		if z.seen[p] && z.frees[p] != d.frees {
			for k, m := range z.maps {
				if k.rank == p && !inUse[k] && !shm.RegionAlive(m.pid, m.ref) {
					_ = m.r.Unmap()
					delete(z.maps, k)
				}
			}
		}
		z.frees[p], z.seen[p] = d.frees, true
	}
	for len(z.maps) >= zcMaxMaps {
		var oldest zcKey
		var found bool
		for k, m := range z.maps {
			if !inUse[k] && (!found || m.used < z.maps[oldest].used) {
				oldest, found = k, true
			}
		}
		if !found {
			return
		}
		_ = z.maps[oldest].r.Unmap()
		delete(z.maps, oldest)
	}
}

// release unmaps every peer region (the communicator's teardown and Suspend).
func (z *zcState) release() {
	if z == nil {
		return
	}
	for k, m := range z.maps {
		_ = m.r.Unmap()
		delete(z.maps, k)
	}
	clear(z.seen)
}
