package core

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func f32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// windowRing: every rank registers n*4 float32 (initialised to -1), puts 4 values
// of its own into the next rank's window at its own slot, signals it, and waits for
// the previous rank's signal; then its window must hold the previous rank's values at
// that rank's slot and -1 elsewhere. want is the access every rank must see to the next.
func windowRing(t *testing.T, comms []*Comm, want Access) {
	n := len(comms)
	errs := onRanks(comms, func(c *Comm) error {
		w, err := c.NewWindow()
		if err != nil {
			return err
		}
		init := make([]float32, 4*n)
		for i := range init {
			init[i] = -1
		}
		if err := w.Register(f32bytes(init), 4*n, Float32); err != nil {
			return err
		}
		next, prev := (c.rank+1)%n, (c.rank+n-1)%n
		if a, err := w.Attr(next); err != nil || a != want {
			return fmt.Errorf("rank %d: access to rank %d is %v (%v), want %v", c.rank, next, a, err, want)
		}
		for round := 0; round < 3; round++ {
			mine := []float32{float32(100*round + 10*c.rank), 1, 2, 3}
			put, err := w.Put(f32bytes(mine), 4, Float32, next, 4*c.rank)
			if err != nil {
				return err
			}
			if err := wait(t, put, "put"); err != nil {
				return err
			}
			if err := signalThenWait(t, w, next, prev); err != nil {
				return err
			}
			mem, hold, err := w.Memory(c.rank)
			if err != nil {
				return err
			}
			got := f32s(mem)
			hold.Release()
			for i, x := range got {
				exp := float32(-1)
				if i/4 == prev {
					exp = []float32{float32(100*round + 10*prev), 1, 2, 3}[i%4]
				}
				if x != exp {
					return fmt.Errorf("rank %d round %d: element %d is %v, want %v (window %v)", c.rank, round, i, x, exp, got)
				}
			}
			// The next round's put must not overwrite what a slow rank still checks.
			b, err := c.Barrier()
			if err != nil {
				return err
			}
			if err := wait(t, b, "barrier"); err != nil {
				return err
			}
		}
		return w.Free()
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func TestWindowPutSignalSameHost(t *testing.T) {
	comms := initAll(t, 3)
	defer destroyAll(t, comms)
	windowRing(t, comms, AccessUnified)
}

func TestWindowPutSignalThroughMessages(t *testing.T) {
	comms := memP2PWith(t, 3, func(c *config) { c.shmDisable = true })
	defer destroyAll(t, comms)
	windowRing(t, comms, AccessSeparate)
}

// A peer's window mapped here aliases it: what one rank writes there the owner reads,
// and the mapping outlives the window while held.
func TestWindowMemoryAliasesPeer(t *testing.T) {
	comms := initAll(t, 2)
	defer destroyAll(t, comms)
	holds := make([]*WindowHold, 2)
	errs := onRanks(comms, func(c *Comm) error {
		w, err := c.NewWindow()
		if err != nil {
			return err
		}
		if err := w.Register(nil, 8, Float32); err != nil {
			return err
		}
		peer := 1 - c.rank
		mem, hold, err := w.Memory(peer)
		if err != nil {
			return err
		}
		holds[c.rank] = hold
		copy(mem, f32bytes([]float32{float32(c.rank + 7)}))
		if err := signalThenWait(t, w, peer, peer); err != nil {
			return err
		}
		own, h, err := w.Memory(c.rank)
		if err != nil {
			return err
		}
		defer h.Release()
		if got := f32s(own)[0]; got != float32(peer+7) {
			return fmt.Errorf("rank %d: its window starts with %v, want %v written by rank %d", c.rank, got, peer+7, peer)
		}
		if err := w.Free(); err != nil {
			return err
		}
		if got := f32s(own)[0]; got != float32(peer+7) { // still mapped: held
			return fmt.Errorf("rank %d: held memory changed after free: %v", c.rank, got)
		}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for _, h := range holds {
		h.Release()
	}
}

func TestWindowSeparateRefusesMapping(t *testing.T) {
	comms := memP2PWith(t, 2, func(c *config) { c.shmDisable = true })
	defer destroyAll(t, comms)
	errs := onRanks(comms, func(c *Comm) error {
		w, err := c.NewWindow()
		if err != nil {
			return err
		}
		if err := w.Register(nil, 4, Int32); err != nil {
			return err
		}
		defer w.Free()
		_, _, err = w.Memory(1 - c.rank)
		if err == nil {
			return fmt.Errorf("rank %d mapped a window reached only through messages", c.rank)
		}
		require.ErrorIs(t, err, ErrNotSupported)
		require.ErrorContains(t, err, "another host")
		_, h, err := w.Memory(c.rank) // its own always maps
		h.Release()
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// A signal that never comes fails the wait at the timeout, naming the silent rank; the
// failed wait consumed nothing, so the signal that comes later satisfies the next one.
func TestWindowWaitSignalTimesOut(t *testing.T) {
	for _, sep := range []bool{false, true} {
		var comms []*Comm
		if sep {
			comms = memP2PWith(t, 2, func(c *config) { c.shmDisable = true })
		} else {
			comms = initAll(t, 2)
		}
		timedOut := make(chan struct{})
		errs := onRanks(comms, func(c *Comm) error {
			w, err := c.NewWindow()
			if err != nil {
				return err
			}
			if err := w.Register(nil, 4, Float32); err != nil {
				return err
			}
			defer w.Free()
			if c.rank == 1 {
				<-timedOut
				s, err := w.Signal(0)
				if err != nil {
					return err
				}
				return wait(t, s, "late signal")
			}
			require.NoError(t, c.SetTimeout(300*time.Millisecond))
			start := time.Now()
			ws, err := w.WaitSignal(1)
			if err != nil {
				return err
			}
			err = wait(t, ws, "wait_signal")
			close(timedOut)
			require.ErrorIs(t, err, ErrTimeout)
			require.ErrorContains(t, err, "wait_signal #1 from rank 1")
			require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond)
			require.NoError(t, c.SetTimeout(20*time.Second))
			ws, err = w.WaitSignal(1)
			if err != nil {
				return err
			}
			return wait(t, ws, "wait_signal for the late signal")
		})
		for r, err := range errs {
			require.NoError(t, err, "rank %d (separate %v)", r, sep)
		}
		destroyAll(t, comms)
	}
}

func TestWindowBadArguments(t *testing.T) {
	comms := memP2PWith(t, 2, func(c *config) { c.shmDisable = true })
	defer destroyAll(t, comms)
	errs := onRanks(comms, func(c *Comm) error {
		w, err := c.NewWindow()
		if err != nil {
			return err
		}
		_, err = w.Put(make([]byte, 4), 1, Float32, 1-c.rank, 0)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.ErrorContains(t, err, "no buffer is registered")
		if err := w.Register(nil, 4, Float32); err != nil {
			return err
		}
		defer w.Free()
		_, err = w.Put(make([]byte, 8), 2, Float32, 1-c.rank, 3)
		require.ErrorIs(t, err, ErrInvalidArgument)
		require.ErrorContains(t, err, "do not fit in its window of 4 elements")
		_, err = w.Put(make([]byte, 8), 1, Float64, 1-c.rank, 0)
		require.ErrorIs(t, err, ErrMismatch)
		_, err = w.Signal(5)
		require.ErrorContains(t, err, "rank 5 is out of range")
		require.ErrorContains(t, w.Register(nil, 4, Float32), "registered already")
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// signalThenWait signals rank to, waits for that, then waits for a signal from rank from.
func signalThenWait(t *testing.T, w *Window, to, from int) error {
	sig, err := w.Signal(to)
	if err != nil {
		return err
	}
	if err := wait(t, sig, "signal"); err != nil {
		return err
	}
	ws, err := w.WaitSignal(from)
	if err != nil {
		return err
	}
	return wait(t, ws, "wait_signal")
}
