package staged

import (
	"fmt"
	"time"

	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/reduce"
)

// A reduction staged by chunk with the reduction on the GPU (Pool.StageReduceGPU):
// all_reduce, reduce_scatter and reduce. Each chunk takes a reduce step, and an
// all_reduce's a gather step too, each one host operation: an all-to-all of host memory
// (core's AlltoAllv, Go's algorithm).
//
//	reduce step: every rank sends each reducer its part of the chunk (copied to the host
//	             as for any chunk): all_reduce splits the chunk into one shard per rank,
//	             reduce_scatter's parts are the chunk of each rank's block, reduce's
//	             reducer is the root. A reducer receives the peers' pieces of its part.
//	             Its end (AfterReduce) queues on the stream: the pieces copied to device
//	             scratch, the rank's own part copied from sendbuff into its place in
//	             recvbuff, gonccl's reduction kernels folding the peers' pieces into it
//	             (rank order; avg divides once) and, for all_reduce, the reduced shard
//	             copied to the host, then an event.
//	gather step: (all_reduce) once that event has completed (BeforeGather), every rank
//	             sends its reduced shard to every peer and receives theirs; its end
//	             (AfterGather) queues the copies of the peers' shards into recvbuff.
//
// The CPU only moves bytes. The pinned memory is a ring of chunks as in StageChunked
// (a slot holds a chunk of sendbuff, of recvbuff for all_reduce, and the peers' pieces):
// a chunk's slot is refilled once its last step's work is queued, behind it. A chunk
// reads and writes only its own elements (in place works), and the copies of one chunk
// overlap the network steps of the others as in StageChunked.

// GPUReduceKind is the collective a StageReduceGPU staging runs.
type GPUReduceKind int

// The collectives StageReduceGPU runs.
const (
	GPUAllReduce GPUReduceKind = iota
	GPUReduceScatter
	GPUReduce
)

// gpuReduce is the GPU-reduction part of a chunked staging.
type gpuReduce struct {
	kind       GPUReduceKind
	k          kernels.Reducer
	dt         reduce.DataType
	op         reduce.RedOp
	rank, n    int
	root       int            // GPUReduce
	send, recv uintptr        // device buffers
	scratch    devBlock       // device, the pool's: the peers' pieces of the own part ((n-1) of the largest)
	gather     [][]byte       // per chunk: host memory the peers' pieces arrive in
	evs        []driver.Event // per chunk (all_reduce): recorded after the reduced shard's copy to the host
	recorded   []bool
}

// shard returns the elements [lo, hi) of a chunk of m elements that are rank r's of n.
func shard(m, r, n int) (int, int) { return m * r / n, m * (r + 1) / n }

// part returns where rank j's part of a chunk of m elements starts in the chunk's host
// memory of sendbuff, and its length: what rank j reduces.
func (red *gpuReduce) part(m, j int) (off, size int) {
	switch red.kind {
	case GPUReduceScatter:
		return j * m, m // sendbuff's host memory holds the chunk of block 0, then block 1...
	case GPUReduce:
		if j == red.root {
			return 0, m
		}
		return 0, 0
	}
	lo, hi := shard(m, j, red.n)
	return lo, hi - lo
}

// StageReduceGPU prepares a reduction (kind) of count elements of dt with op on stream s
// from send to recv (device pointers; reduce_scatter: count is the elements per rank,
// send holds nranks blocks of it; reduce: recv is used on root only; in place works) as
// rank rank of nranks, pipelined in chunks of per elements, its pinned memory at most
// limit bytes (as StageChunked's), reducing on the GPU with k (gonccl's kernels, loaded
// in ctx). Each chunk takes its ReduceStep and, for all_reduce, its GatherStep, in that
// order; call SetIssued with the number of host operations issued.
func (p *Pool) StageReduceGPU(ctx driver.Context, s driver.Stream, k kernels.Reducer, kind GPUReduceKind, send, recv uintptr, count int, dt reduce.DataType,
	op reduce.RedOp, per, limit, rank, nranks, root int) (*Staging, error) {
	if nranks < 2 || rank < 0 || rank >= nranks || k == nil || (kind == GPUReduce && (root < 0 || root >= nranks)) || per <= 0 {
		return nil, fmt.Errorf("cuda: StageReduceGPU: rank %d of %d, root %d, chunk %d elements", rank, nranks, root, per)
	}
	red := &gpuReduce{kind: kind, k: k, dt: dt, op: op, rank: rank, n: nranks, root: root, send: send, recv: recv}
	es := dt.Size()
	n := ChunkCount(count, per)
	maxPiece := 0
	for c := 0; c < n; c++ {
		m := min(count, (c+1)*per) - c*per
		_, size := red.part(m, rank)
		maxPiece = max(maxPiece, size)
	}
	slot := (nranks - 1) * maxPiece * es // a slot's memory for the peers' pieces
	var pieces []Piece
	switch kind {
	case GPUAllReduce:
		pieces = []Piece{{Name: "sendbuff", Ptr: send, Blocks: 1, In: true}, {Name: "recvbuff", Ptr: recv, Blocks: 1, Out: true}}
	case GPUReduceScatter:
		pieces = []Piece{{Name: "sendbuff", Ptr: send, Blocks: nranks, In: true}}
	default:
		pieces = []Piece{{Name: "sendbuff", Ptr: send, Blocks: 1, In: true}}
	}
	return p.stageChunked(ctx, s, pieces, count, es, per, limit, slot, func(st *Staging, mem []byte) error {
		red.gather, red.evs, red.recorded = make([][]byte, n), make([]driver.Event, n), make([]bool, n)
		st.ch.red = red
		for c := 0; c < n; c++ {
			m := min(count, (c+1)*per) - c*per
			_, size := red.part(m, rank)
			size *= (nranks - 1) * es
			off := (c % st.ch.window) * slot
			red.gather[c] = mem[off : off+size : off+size]
		}
		if maxPiece > 0 {
			var err error
			if red.scratch, err = p.getDevLocked(ctx, (nranks-1)*maxPiece*es); err != nil {
				return fmt.Errorf("allocating device scratch for the staged reduction: %w", err)
			}
		}
		return p.d.Do(ctx, func() (err error) {
			if kind != GPUAllReduce {
				return nil
			}
			for c := range red.evs {
				if red.evs[c], err = p.d.EventCreate(); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// chunkLen is the number of elements of chunk k.
func (ch *chunking) chunkLen(k int) int {
	lo, hi := ch.bounds(k)
	return hi - lo
}

// Step is one host operation of a GPU-reduced chunk: an all-to-all of Send to Recv
// (host memory) with per-peer element counts and displacements, as core.AlltoAllv
// takes them.
type Step struct {
	Send, Recv                                     []byte
	SendCounts, SendDispls, RecvCounts, RecvDispls []int
}

// ReduceStep returns chunk k's reduce step: each reducer's part of the chunk to it, the
// peers' pieces of the own part into the gather memory (rank order, the own left out).
func (s *Staging) ReduceStep(k int) Step {
	ch, red := s.ch, s.ch.red
	m := ch.chunkLen(k)
	st := Step{Send: s.ChunkHost(k)[0], Recv: red.gather[k]}
	st.SendCounts, st.SendDispls = make([]int, red.n), make([]int, red.n)
	st.RecvCounts, st.RecvDispls = make([]int, red.n), make([]int, red.n)
	_, mine := red.part(m, red.rank)
	slot := 0
	for j := 0; j < red.n; j++ {
		if j == red.rank {
			continue // the own part stays on the device
		}
		st.SendDispls[j], st.SendCounts[j] = red.part(m, j)
		st.RecvCounts[j], st.RecvDispls[j] = mine, slot*mine
		slot++
	}
	return st
}

// GatherStep returns chunk k's gather step: the own reduced shard to every peer, the
// peers' shards into their places in the chunk's host memory of recvbuff.
func (s *Staging) GatherStep(k int) Step {
	ch, red := s.ch, s.ch.red
	m := ch.chunkLen(k)
	host := s.ChunkHost(k)[1]
	es := red.dt.Size()
	mlo, mhi := shard(m, red.rank, red.n)
	st := Step{Send: host[mlo*es : mhi*es], Recv: host}
	st.SendCounts, st.SendDispls = make([]int, red.n), make([]int, red.n)
	st.RecvCounts, st.RecvDispls = make([]int, red.n), make([]int, red.n)
	for j := 0; j < red.n; j++ {
		if j == red.rank {
			continue
		}
		lo, hi := shard(m, j, red.n)
		st.SendCounts[j] = mhi - mlo
		st.RecvCounts[j], st.RecvDispls[j] = hi-lo, lo
	}
	return st
}

// AfterReduce ends chunk k's reduce step: unless a step failed, it queues the
// reduction of the own part on the GPU and, for all_reduce, its copy to the host.
func (s *Staging) AfterReduce(k int, opErr error) error {
	last := k // the chunk's last step: its slot is free once this step's work has run
	if s.ch.red.kind == GPUAllReduce {
		last = -1
	}
	return s.afterStep(opErr, last, func() error {
		ch, red := s.ch, s.ch.red
		es := red.dt.Size()
		lo, _ := ch.bounds(k)
		m := ch.chunkLen(k)
		at, size := red.part(m, red.rank)
		if size == 0 {
			return nil // nothing of this chunk is the own part: BeforeGather has nothing to wait for
		}
		// Where the own part lies in sendbuff and goes in recvbuff.
		var src, dst uintptr
		switch red.kind {
		case GPUReduceScatter:
			src, dst = red.send+uintptr((red.rank*ch.count+lo)*es), red.recv+uintptr(lo*es)
		default:
			src, dst = red.send+uintptr((lo+at)*es), red.recv+uintptr((lo+at)*es)
		}
		s.inFlight = true
		out := s.out()
		if err := s.d.MemcpyHtoD(red.scratch.p, red.gather[k], out); err != nil {
			return withWhat(err, fmt.Sprintf("the peers' pieces of chunk %d of %d, %d bytes", k, ch.n, len(red.gather[k])))
		}
		if src != dst {
			if err := s.d.MemcpyDtoD(dst, src, size*es, out); err != nil {
				return withWhat(err, fmt.Sprintf("the own part of chunk %d of %d, %d bytes", k, ch.n, size*es))
			}
		}
		for i := 0; i < red.n-1; i++ {
			if err := red.k.ReduceInto(out, dst, red.scratch.p+uintptr(i*size*es), size, red.dt, red.op); err != nil {
				return err
			}
		}
		if red.op == reduce.Avg {
			if err := red.k.DivideBy(out, dst, size, red.dt, red.n); err != nil {
				return err
			}
		}
		if red.kind != GPUAllReduce {
			return nil
		}
		host := s.ChunkHost(k)[1]
		if err := s.d.MemcpyDtoH(host[at*es:(at+size)*es], dst, out); err != nil {
			return withWhat(err, fmt.Sprintf("the reduced shard of chunk %d of %d, %d bytes", k, ch.n, size*es))
		}
		if err := s.d.EventRecord(red.evs[k], out); err != nil {
			return err
		}
		red.recorded[k] = true
		return nil
	})
}

// BeforeGather waits (until deadline) until chunk k's reduced shard is in host memory.
func (s *Staging) BeforeGather(k int, deadline time.Time) error {
	red := s.ch.red
	return s.waitEvent(red.evs, red.recorded, k, deadline, "the reduction on the GPU")
}

// AfterGather ends chunk k's gather step: unless a step failed, it queues the copies
// of the peers' reduced shards into recvbuff.
func (s *Staging) AfterGather(k int, opErr error) error {
	return s.afterStep(opErr, k, func() error {
		ch, red := s.ch, s.ch.red
		es := red.dt.Size()
		lo, _ := ch.bounds(k)
		m := ch.chunkLen(k)
		mlo, mhi := shard(m, red.rank, red.n)
		host := s.ChunkHost(k)[1]
		recv := red.recv + uintptr(lo*es)
		for _, r := range [][2]int{{0, mlo}, {mhi, m}} {
			if r[1] == r[0] {
				continue
			}
			s.inFlight = true
			if err := s.d.MemcpyHtoD(recv+uintptr(r[0]*es), host[r[0]*es:r[1]*es], s.out()); err != nil {
				return withWhat(err, fmt.Sprintf("recvbuff, chunk %d of %d, %d bytes", k, ch.n, (r[1]-r[0])*es))
			}
		}
		return nil
	})
}
