package core

import (
	"encoding/binary"
	"fmt"

	"github.com/gonccl/gonccl/transport/shm"
)

// The descriptor each rank sends its peers in the describe step of a zero-copy
// collective (zerocopy.go): whether it can take the path, and where its buffers lie.

// zcDesc is one rank's descriptor for an operation.
type zcDesc struct {
	willing    bool   // GONCCL_ZEROCOPY and every link of the rank is shared memory
	pid        int    // whose /proc/PID/fd the regions are mapped through
	frees      uint64 // shm.RegionsFreed of the rank (see zcState.evict)
	send, recv zcBuf
}

// zcBuf is where one buffer of a rank lies.
type zcBuf struct {
	shared bool // in a region (ref says where); false: ordinary memory, or not used
	ref    shm.RegionRef
}

func (d *zcDesc) encode(b []byte) {
	clear(b[:zcDescBytes])
	binary.LittleEndian.PutUint32(b[0:], 0x44435a47) // "GZCD"
	flags := byte(0)
	if d.willing {
		flags |= 1
	}
	if d.send.shared {
		flags |= 2
	}
	if d.recv.shared {
		flags |= 4
	}
	b[4] = flags
	binary.LittleEndian.PutUint32(b[8:], uint32(d.pid))
	binary.LittleEndian.PutUint64(b[16:], d.frees)
	encodeRef(b[24:64], d.send.ref)
	encodeRef(b[64:104], d.recv.ref)
}

func encodeRef(b []byte, r shm.RegionRef) {
	binary.LittleEndian.PutUint64(b[0:], r.ID)
	binary.LittleEndian.PutUint32(b[8:], uint32(int32(r.FD)))
	binary.LittleEndian.PutUint64(b[16:], r.Ino)
	binary.LittleEndian.PutUint64(b[24:], uint64(r.Size))
	binary.LittleEndian.PutUint64(b[32:], uint64(r.Off))
}

func decodeRef(b []byte) shm.RegionRef {
	return shm.RegionRef{ID: binary.LittleEndian.Uint64(b[0:]), FD: int(int32(binary.LittleEndian.Uint32(b[8:]))),
		Ino: binary.LittleEndian.Uint64(b[16:]), Size: int(binary.LittleEndian.Uint64(b[24:])),
		Off: int(binary.LittleEndian.Uint64(b[32:]))}
}

func decodeZCDesc(b []byte) (zcDesc, error) {
	if binary.LittleEndian.Uint32(b[0:]) != 0x44435a47 {
		return zcDesc{}, fmt.Errorf("not a zero-copy descriptor")
	}
	f := b[4]
	return zcDesc{willing: f&1 != 0, pid: int(binary.LittleEndian.Uint32(b[8:])), frees: binary.LittleEndian.Uint64(b[16:]),
		send: zcBuf{shared: f&2 != 0, ref: decodeRef(b[24:64])}, recv: zcBuf{shared: f&4 != 0, ref: decodeRef(b[64:104])}}, nil
}
