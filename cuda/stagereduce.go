package cuda

import (
	"fmt"
	"time"

	"github.com/gonccl/gonccl/internal/reduce"
)

// An all_reduce staged by chunk with the reduction on the GPU (Pool.StageAllReduceGPU).
// Each chunk of m elements is split into one shard per rank and takes two host
// operations, both all-to-alls of the host memory (core's AlltoAllv, Go's algorithm):
//
//	reduce step: every rank sends shard j of its chunk (copied to the host as for any
//	             chunk) to rank j, and receives the peers' pieces of its own shard. Its
//	             end (AfterReduce) queues on the stream: the pieces copied to device
//	             scratch, the own shard of sendbuff into recvbuff, gonccl's reduction
//	             kernels folding the peers' pieces into it (rank order; avg divides
//	             once), and the reduced shard copied to the host, then an event.
//	gather step: once that event has completed (BeforeGather), every rank sends its
//	             reduced shard to every peer and receives theirs; its end (AfterGather)
//	             queues the copies of the peers' shards into recvbuff.
//
// The CPU only moves bytes. Every copy to the host of sendbuff is queued first (at
// chunk 0), so the inputs are read before recvbuff is written (in place works), and the
// copies of one chunk overlap the network steps of the others as in StageChunked.

// gpuReduce is the GPU-reduction part of a chunked staging.
type gpuReduce struct {
	k        Reducer
	dt       reduce.DataType
	op       reduce.RedOp
	rank, n  int
	scratch  uintptr  // device: the peers' pieces of the own shard ((n-1) of the largest)
	gather   [][]byte // per chunk: host memory the peers' pieces arrive in
	evs      []event  // per chunk: recorded after the reduced shard's copy to the host
	recorded []bool
}

// shard returns the elements [lo, hi) of a chunk of m elements that are rank r's of n.
func shard(m, r, n int) (int, int) { return m * r / n, m * (r + 1) / n }

// StageAllReduceGPU prepares an all_reduce of count elements of dt with op on stream s
// from send to recv (device pointers; equal: in place) as rank rank of nranks,
// pipelined in chunks of per elements, reducing on the GPU with k (gonccl's kernels,
// loaded in ctx). Each chunk takes two host operations (ReduceStep, GatherStep) in that
// order; call SetIssued with the number of host operations issued (at most 2*Chunks).
func (p *Pool) StageAllReduceGPU(ctx Context, s Stream, k Reducer, send, recv uintptr, count int, dt reduce.DataType,
	op reduce.RedOp, per, rank, nranks int) (*Staging, error) {
	if nranks < 2 || rank < 0 || rank >= nranks || k == nil {
		return nil, fmt.Errorf("cuda: StageAllReduceGPU: rank %d of %d", rank, nranks)
	}
	es := dt.Size()
	n := ChunkCount(count, per)
	extra, maxPiece := 0, 0
	for c := 0; c < n; c++ {
		m := min(count, (c+1)*per) - c*per
		lo, hi := shard(m, rank, nranks)
		extra += (nranks - 1) * (hi - lo) * es
		maxPiece = max(maxPiece, hi-lo)
	}
	pieces := []Piece{{Name: "sendbuff", Ptr: send, Blocks: 1, In: true}, {Name: "recvbuff", Ptr: recv, Blocks: 1, Out: true}}
	return p.stageChunked(ctx, s, pieces, count, es, per, extra, func(st *Staging, mem []byte) error {
		red := &gpuReduce{k: k, dt: dt, op: op, rank: rank, n: nranks,
			gather: make([][]byte, n), evs: make([]event, n), recorded: make([]bool, n)}
		st.ch.red = red
		off := 0
		for c := 0; c < n; c++ {
			m := min(count, (c+1)*per) - c*per
			lo, hi := shard(m, rank, nranks)
			size := (nranks - 1) * (hi - lo) * es
			red.gather[c] = mem[off : off+size : off+size]
			off += size
		}
		return p.d.do(ctx, func() (err error) {
			if maxPiece > 0 {
				if red.scratch, err = p.d.memAlloc((nranks - 1) * maxPiece * es); err != nil {
					return fmt.Errorf("allocating device scratch for the staged reduction: %w", err)
				}
			}
			for c := range red.evs {
				if red.evs[c], err = p.d.eventCreate(); err != nil {
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

// ReduceStep returns chunk k's reduce step: shard j of the chunk to rank j, the peers'
// pieces of the own shard into the gather memory (rank order, the own left out).
func (s *Staging) ReduceStep(k int) Step {
	ch, red := s.ch, s.ch.red
	m := ch.chunkLen(k)
	st := Step{Send: s.ChunkHost(k)[0], Recv: red.gather[k]}
	st.SendCounts, st.SendDispls = make([]int, red.n), make([]int, red.n)
	st.RecvCounts, st.RecvDispls = make([]int, red.n), make([]int, red.n)
	mlo, mhi := shard(m, red.rank, red.n)
	slot := 0
	for j := 0; j < red.n; j++ {
		if j == red.rank {
			continue // the own shard stays on the device
		}
		lo, hi := shard(m, j, red.n)
		st.SendCounts[j], st.SendDispls[j] = hi-lo, lo
		st.RecvCounts[j], st.RecvDispls[j] = mhi-mlo, slot*(mhi-mlo)
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
// reduction of the own shard on the GPU and its copy to the host (see above).
func (s *Staging) AfterReduce(k int, opErr error) error {
	return s.afterStep(opErr, func() error {
		ch, red := s.ch, s.ch.red
		es := red.dt.Size()
		lo, _ := ch.bounds(k)
		m := ch.chunkLen(k)
		mlo, mhi := shard(m, red.rank, red.n)
		size := mhi - mlo
		if size == 0 {
			return nil // nothing of this chunk is the own shard: BeforeGather has nothing to wait for
		}
		s.inFlight = true
		if err := s.d.memcpyHtoD(red.scratch, red.gather[k], s.stream); err != nil {
			return withWhat(err, fmt.Sprintf("the peers' pieces of chunk %d of %d, %d bytes", k, ch.n, len(red.gather[k])))
		}
		send, recv := ch.pieces[0].Ptr, ch.pieces[1].Ptr
		off := uintptr((lo + mlo) * es)
		if send != recv {
			if err := s.d.memcpyDtoD(recv+off, send+off, size*es, s.stream); err != nil {
				return withWhat(err, fmt.Sprintf("the own shard of chunk %d of %d, %d bytes", k, ch.n, size*es))
			}
		}
		for i := 0; i < red.n-1; i++ {
			if err := red.k.ReduceInto(s.stream, recv+off, red.scratch+uintptr(i*size*es), size, red.dt, red.op); err != nil {
				return err
			}
		}
		if red.op == reduce.Avg {
			if err := red.k.DivideBy(s.stream, recv+off, size, red.dt, red.n); err != nil {
				return err
			}
		}
		host := s.ChunkHost(k)[1]
		if err := s.d.memcpyDtoH(host[mlo*es:mhi*es], recv+off, s.stream); err != nil {
			return withWhat(err, fmt.Sprintf("the reduced shard of chunk %d of %d, %d bytes", k, ch.n, size*es))
		}
		if err := s.d.eventRecord(red.evs[k], s.stream); err != nil {
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
	return s.afterStep(opErr, func() error {
		ch, red := s.ch, s.ch.red
		es := red.dt.Size()
		lo, _ := ch.bounds(k)
		m := ch.chunkLen(k)
		mlo, mhi := shard(m, red.rank, red.n)
		host := s.ChunkHost(k)[1]
		recv := ch.pieces[1].Ptr + uintptr(lo*es)
		for _, r := range [][2]int{{0, mlo}, {mhi, m}} {
			if r[1] == r[0] {
				continue
			}
			s.inFlight = true
			if err := s.d.memcpyHtoD(recv+uintptr(r[0]*es), host[r[0]*es:r[1]*es], s.stream); err != nil {
				return withWhat(err, fmt.Sprintf("recvbuff, chunk %d of %d, %d bytes", k, ch.n, (r[1]-r[0])*es))
			}
		}
		return nil
	})
}
