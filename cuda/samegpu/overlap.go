package samegpu

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gonccl/gonccl/cuda/driver"
)

// The ranks' streams order each other, so that a call returns once its part is on its
// stream, before any of the operation's GPU work has run (DDP's bucket all_reduces then
// overlap the backward pass, as on the staged path). Operation n:
//
//	follower r's stream:  [copy in] | write launcher.arrive[r][n] = n |
//	                      wait own.go[n] >= n | [copy out] | write own.done[n] = n
//	launcher's stream:    for each follower r: wait own.arrive[r][n] >= n |
//	                      kernels | for each follower r: write r.go[n] = n | write own.done[n] = n
//
// where [n] is operation n's slot (n % seqSlots): a rank may run operations on several
// streams, so each operation in flight has words of its own, and a rank reuses a slot
// only once its own part of the slot's previous operation has run (slotFree).
//
// The hosts still meet: a follower publishes its buffers and waits (on the host) until
// the launcher has read them and enqueued the operation, so that every rank sees a
// mismatch in the same operation, and the launcher waits for every follower's
// description before it can map its buffers. Neither waits for GPU work.
//
// A stream waits only on words of its own rank's page (arrive in the launcher's, go in
// a follower's), written by another rank's stream. So a rank can release its own
// streams, and only its own: a watcher goroutine per rank follows its done words
// while operations are on the GPU, and gives up when the communicator
// fails (Watch: a dead or stopped peer, an abort) or when its stream has made no
// progress for the path's timeout. It then writes, from the host, a value that
// satisfies every wait its stream has queued (the last operation enqueued plus 2^30,
// in the cyclic comparison CU_STREAM_WAIT_VALUE_GEQ makes), again and again until its
// stream has run everything enqueued, since a live peer's stream may still overwrite
// the word with a smaller value. The operations released that way ran without their
// inputs: the error the rank's next operation and Close return says so. No other rank
// is released by it: each gives up when its own host learns of the failure.
//
// Without MPS, the contexts of the ranks' processes take turns on the GPU, and a
// stream waiting for another context's write keeps its turn: a wait that is not
// already met when its stream reaches it costs up to a time slice of the GPU.

// streamSync is a rank's part of the stream ordering above.
type streamSync struct {
	enqueued   atomic.Uint64         // the last operation whose whole part is on this rank's stream
	failed     atomic.Pointer[error] // why the watcher gave up: the next operation and Close return it
	xbufOp     uint64                // the last operation that used the exchange buffer
	xbufStream driver.Stream         // and its stream
	kick       chan struct{}         // an operation was enqueued
	stop       chan struct{}
	done       chan struct{}
}

// startWatch starts the watcher of this rank's stream (after connect).
func (g *SameGPU) startWatch() {
	g.sync.kick = make(chan struct{}, 1)
	g.sync.stop = make(chan struct{})
	g.sync.done = make(chan struct{})
	go g.watchStream()
}

// stopWatch stops the watcher and waits for it.
func (g *SameGPU) stopWatch() {
	if g.sync.stop == nil {
		return
	}
	close(g.sync.stop)
	<-g.sync.done
	g.sync.stop = nil
}

// enqueued says operation n's part is on this rank's stream.
func (g *SameGPU) enqueued(n uint64) {
	g.sync.enqueued.Store(n)
	select {
	case g.sync.kick <- struct{}{}:
	default:
	}
}

// watchPause is how often the watcher looks while operations are on the GPU.
const watchPause = time.Millisecond

func (g *SameGPU) watchStream() {
	defer close(g.sync.done)
	var seen uint64
	var since time.Time // when the stream last finished an operation, while operations are pending
	var stopAt time.Time
	for {
		n := g.sync.enqueued.Load()
		first := g.pending(n)
		if first == 0 {
			since = time.Time{}
			select {
			case <-g.sync.stop:
				return
			case <-g.sync.kick:
			}
			continue
		}
		if since.IsZero() || first != seen {
			seen, since = first, time.Now()
		}
		if g.sync.failed.Load() == nil {
			g.check(n, first, since)
		}
		if g.sync.failed.Load() != nil {
			if stopAt.IsZero() {
				stopAt = time.Now().Add(max(g.timeout, time.Second))
			}
			if time.Now().Before(stopAt) { // else a stream held by something else than this path's waits
				g.release(n)
			}
		}
		select {
		case <-g.sync.stop:
			return
		case <-time.After(watchPause):
		}
	}
}

// pending is the first operation up to n whose part this rank's streams have not run,
// or 0 if none.
func (g *SameGPU) pending(n uint64) uint64 {
	for m := n - min(n, seqSlots-1); m <= n; m++ {
		if !g.own.done(m, n) {
			return m
		}
	}
	return 0
}

// check gives up on the path if the communicator has failed or this rank's stream has
// been stuck at operation first (up to n enqueued) since since for the path's timeout.
func (g *SameGPU) check(n, first uint64, since time.Time) {
	var why error
	if err := g.commErr(); err != nil {
		why = fmt.Errorf("%s, and gave up: the communicator failed: %w", g.stuck(n, first), err)
	} else if time.Since(since) > g.timeout {
		why = fmt.Errorf("%w: %s for %v", ErrSameGPUTimeout, g.stuck(n, first), g.timeout)
	}
	if why != nil {
		g.sync.failed.CompareAndSwap(nil, &why)
	}
}

// stuck says what this rank's stream waits for in operation m (up to n enqueued).
func (g *SameGPU) stuck(n, m uint64) string {
	if g.rank != launcher {
		return fmt.Sprintf("rank %d's stream waited for rank %d's same-GPU operation %d to run on the GPU", g.rank, launcher, m)
	}
	for p := range g.nranks {
		if p != g.rank && !reached(g.own.word32(arriveAt(p, m)).Load(), m) {
			return fmt.Sprintf("rank %d's stream waited for rank %d's stream to reach same-GPU operation %d", g.rank, p, m)
		}
	}
	return fmt.Sprintf("rank %d's stream did not finish same-GPU operation %d (up to %d enqueued)", g.rank, m, n)
}

// release satisfies every wait this rank's streams have queued for operations up to n
// (all within the last seqSlots).
func (g *SameGPU) release(n uint64) {
	v := uint32(n) + 1<<30
	for i := range uint64(seqSlots) {
		if g.rank != launcher {
			g.own.word32(goAt(i)).Store(v)
			continue
		}
		for p := range g.nranks {
			if p != g.rank {
				g.own.word32(arriveAt(p, i)).Store(v)
			}
		}
	}
}

// slotFree waits until operation n's slot is free: this rank's streams have run their
// part of operation n - seqSlots (at most seqSlots operations of a rank are on the GPU
// at once). Its host thread, not the GPU: the operations it waits for were enqueued by
// every rank before.
func (g *SameGPU) slotFree(n uint64, deadline time.Time) error {
	if n <= seqSlots || g.own.done(n-seqSlots, n-1) {
		return nil
	}
	return g.wait(deadline, func() string {
		return fmt.Sprintf("rank %d waited for its same-GPU operation %d to run before enqueuing operation %d (%d on the GPU at most): %s",
			g.rank, n-seqSlots, n, seqSlots, g.stuck(n-1, n-seqSlots))
	}, func() (bool, error) {
		if err := g.watchErr(); err != nil {
			return false, err
		}
		return g.own.done(n-seqSlots, n-1), nil
	})
}

// watchErr is why the watcher gave up on the path, or nil.
func (g *SameGPU) watchErr() error {
	if e := g.sync.failed.Load(); e != nil {
		return *e
	}
	return nil
}

// drainOwn waits until this rank's stream has run its part of every operation
// enqueued (Close: its streams may still read the exchange buffers and wait on its
// page). It releases the stream itself, as the watcher does, once the communicator
// has failed or at the deadline, and returns an error if even that does not drain it.
func (g *SameGPU) drainOwn(deadline time.Time) error {
	n := g.sync.enqueued.Load()
	if n == 0 {
		return nil
	}
	hard := deadline.Add(max(g.timeout, time.Second)) // after a release, how long to wait for the stream
	return g.waitGPU(hard, func() string {
		return fmt.Sprintf("rank %d waited for its streams to finish their same-GPU operations before closing (%s)", g.rank, g.stuck(n, g.pending(n)))
	}, func() (bool, error) {
		first := g.pending(n)
		if first == 0 {
			return true, nil
		}
		if g.sync.failed.Load() == nil {
			if err := g.commErr(); err != nil || time.Now().After(deadline) {
				why := fmt.Errorf("%s before closing, and gave up: %w", g.stuck(n, first), orTimeout(err))
				g.sync.failed.CompareAndSwap(nil, &why)
			}
		}
		if g.sync.failed.Load() != nil {
			g.release(n)
		}
		return false, nil
	})
}

func orTimeout(err error) error {
	if err != nil {
		return fmt.Errorf("the communicator failed: %w", err)
	}
	return ErrSameGPUTimeout
}

// exchangeFree waits until operation n, on stream s, may use the exchange buffer: the
// last operation that used it is done, when it ran on another stream (on s, stream
// order suffices).
func (g *SameGPU) exchangeFree(s driver.Stream, n uint64, deadline time.Time) error {
	prev, ps := g.sync.xbufOp, g.sync.xbufStream
	g.sync.xbufOp, g.sync.xbufStream = n, s
	if prev == 0 || ps == s || g.own.done(prev, n-1) {
		return nil
	}
	return g.wait(deadline, func() string {
		return fmt.Sprintf("rank %d waited for its same-GPU operation %d, on another stream, to leave the exchange buffer to operation %d: %s",
			g.rank, prev, n, g.stuck(n-1, prev))
	}, func() (bool, error) {
		if err := g.watchErr(); err != nil {
			return false, err
		}
		return g.own.done(prev, n-1), nil
	})
}
