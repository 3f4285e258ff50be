package cuda

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gonccl/gonccl/transport"
)

// When the device path goes wrong, the GPU must not wait for ever. A rank's streams
// wait only on words of its own header (shared.go) and of its own point-to-point
// flags (devp2p.go), so a rank gives up on its own:
//
//   - a peer died or the communicator failed (the host learns it: core's heartbeats,
//     a lost link, an abort; WatchConfig.Err),
//   - an operation has been on the GPU longer than the communicator's timeout (a
//     peer stopped issuing, or is too slow),
//   - the ranks disagree on an operation (devdesc.go: their streams wait for
//     descriptors that never match),
//
// and then writes, from the host, values into its own header (and point-to-point
// flags: devp2pwatch.go), host memory the GPU maps (hostflags.go), that satisfy every
// wait its streams have queued (flags: the last round number plus 2^30; descriptor words: their poison
// values), again and again until those streams have run everything enqueued, since
// a live peer's stream may still overwrite a word. The
// operations released that way have run without their inputs: their outputs are not
// valid, which the communicator's error says. No other rank is released by it: each
// gives up when its own host learns of the failure, so a rank whose host has seen
// nothing never takes garbage for a result.
//
// Who notices: a watcher goroutine per communicator (Watch). The host never waits on
// the GPU for an operation: the watcher only asks CUDA events (cuEventQuery) whether
// the operations enqueued have started and finished, and reads its own header (host
// memory, no stream involved) only for an operation on the GPU longer than
// WatchConfig.CheckAfter, to name the ranks that disagree or lag. A mismatch is
// thus reported CheckAfter after the ranks meet, a dead peer as soon as core knows,
// a hung one at the timeout. The communicator (core's FailDevice) tells the peers what
// this rank found, since once it released its streams their headers may no longer show
// it: their watchers then find the communicator broken (WatchConfig.Err) with "rank N
// reports: ...", of the same class. A kernel that compared the descriptors would
// report a mismatch without the host, but could only spin (holding an SM) or write a
// word the host must read all the same; the stream waits cost no SM.

// pendingOp is an operation enqueued on the GPU and not yet seen finished.
type pendingOp struct {
	desc        opDesc
	described   bool
	first, last uint32 // its rounds
	start, end  event  // recorded before its first round and after its last
	started     time.Time
	p2p         []p2pWait // a stream's part of a point-to-point group (devp2pwatch.go); nil for a collective
}

// WatchConfig is what the watcher needs of the communicator.
type WatchConfig struct {
	Timeout    func() time.Duration // an operation on the GPU longer than this fails
	Err        func() error         // the communicator's error once it has failed (a lost peer, a peer's report, an abort), else nil
	Fail       func(err error)      // told once, when this rank gives up on the device path, with why
	CheckAfter time.Duration        // read the header of an operation on the GPU this long (default 20 ms)
}

type watch struct {
	cfg  WatchConfig
	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	disagree   string // the disagreement the last look at the header saw, if any
	disagreeAt uint32 // and the first round of the operation it was about
}

// trackStart records the start event of the operation whose first round begins now
// on r.st. s.mu held, context current.
func (s *Shared) trackStart(st Stream) error {
	ev, err := s.event()
	if err != nil {
		return err
	}
	s.curStart = ev
	return s.d.EventRecord(ev, st)
}

// track records the operation whose rounds run from first to s.step, on s.lastStream.
// s.mu held, context current.
func (s *Shared) track(d *opDesc, first uint32) error {
	ev, err := s.event()
	if err != nil {
		return err
	}
	op := pendingOp{first: first, last: s.step, start: s.curStart, end: ev}
	s.curStart = 0
	if d != nil {
		op.desc, op.described = *d, true
	}
	s.ops = append(s.ops, op)
	if s.watch != nil {
		select {
		case s.watch.kick <- struct{}{}:
		default:
		}
	}
	return s.d.EventRecord(ev, s.lastStream)
}

func (s *Shared) event() (event, error) {
	if n := len(s.spare); n > 0 {
		ev := s.spare[n-1]
		s.spare = s.spare[:n-1]
		return ev, nil
	}
	return s.d.EventCreate()
}

// Watch starts the watcher of this rank's device operations (see above); Close and
// Abort stop it.
func (s *Shared) Watch(cfg WatchConfig) {
	if cfg.CheckAfter <= 0 {
		cfg.CheckAfter = 20 * time.Millisecond
	}
	w := &watch{cfg: cfg, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.mu.Lock()
	if s.watch != nil || s.own == 0 {
		s.mu.Unlock()
		return
	}
	s.watch, s.commErr = w, cfg.Err
	s.mu.Unlock()
	go s.watchLoop(w)
}

// stopWatch stops the watcher and waits for it. s.mu not held.
func (s *Shared) stopWatch() {
	s.mu.Lock()
	w := s.watch
	s.mu.Unlock()
	if w == nil {
		return
	}
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (s *Shared) watchLoop(w *watch) {
	defer close(w.done)
	var giveUpAt time.Time // after a failure: stop releasing then, if the streams never drain
	pause := time.Millisecond
	for {
		head, pending, err := s.reap()
		s.mu.Lock()
		failed := s.failed
		s.mu.Unlock()
		switch {
		case err != nil && failed == nil:
			s.giveUp(w, fmt.Errorf("cuda: asking the GPU about a device-path operation: %w", err))
		case failed == nil && pending:
			// The communicator's error (a lost peer, a peer's report, an abort) ends
			// the wait, but a disagreement this watcher has seen once is looked at
			// again first: a mismatch it confirms is the cause, and a vaguer error a
			// consequence (core's FailDevice prefers it to a peer's vaguer report,
			// and tells the peers).
			cerr := w.cfg.Err()
			if cerr == nil || (w.disagree != "" && !errors.Is(cerr, transport.ErrMismatch)) {
				if ferr := s.judge(w, head); ferr != nil && (cerr == nil || errors.Is(ferr, transport.ErrMismatch)) {
					cerr = ferr
				}
			}
			if cerr != nil {
				s.giveUp(w, cerr)
			}
		}
		s.mu.Lock()
		failed = s.failed
		s.mu.Unlock()
		if failed != nil {
			if !pending {
				return
			}
			if giveUpAt.IsZero() {
				giveUpAt = time.Now().Add(max(w.cfg.Timeout(), time.Second))
			}
			if time.Now().After(giveUpAt) {
				return // a stream blocked by something else than gonccl's waits
			}
			_ = s.releaseStreams()
		}
		if !pending {
			pause = time.Millisecond
			select {
			case <-w.stop:
				return
			case <-w.kick:
			}
			continue
		}
		select {
		case <-w.stop:
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, 20*time.Millisecond)
	}
}

// reap drops the operations the GPU has finished, stamps when the oldest pending
// one started, and returns it (pending false if there is none).
func (s *Shared) reap() (head pendingOp, pending bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reapLocked()
}

// reapLocked is reap with s.mu held.
func (s *Shared) reapLocked() (head pendingOp, pending bool, err error) {
	err = s.d.Do(s.ctx, func() error {
		for len(s.ops) > 0 {
			op := &s.ops[0]
			if op.started.IsZero() && op.start != 0 {
				ok, err := s.d.EventDone(op.start)
				if err != nil {
					return err
				}
				if ok {
					op.started = time.Now()
				}
			}
			ok, err := s.d.EventDone(op.end)
			if err != nil || !ok {
				return err
			}
			s.spare = append(s.spare, op.end)
			if op.start != 0 {
				s.spare = append(s.spare, op.start)
			}
			s.ops = s.ops[1:]
		}
		return nil
	})
	if len(s.ops) == 0 {
		return pendingOp{}, false, err
	}
	return s.ops[0], true, err
}

// judge looks at the oldest pending operation: an error if the ranks disagree on it
// or it has been on the GPU longer than the timeout.
func (s *Shared) judge(w *watch, op pendingOp) error {
	if op.p2p != nil {
		return s.judgeP2P(w, op)
	}
	if op.started.IsZero() {
		return nil // the stream has not reached it: earlier work of the caller's
	}
	age := time.Since(op.started)
	if age < w.cfg.CheckAfter {
		return nil
	}
	hdr, rerr := s.readHeader(w)
	var disagree, lag []string
	if rerr == nil {
		disagree, lag = s.diagnose(op, hdr)
	}
	if done, err := s.finished(op); done || err != nil {
		return err // it finished while the header was read: what it said is of later work
	}
	// A disagreement is for ever; what a peer's slot says while it moves on to its next
	// operation is not: only one seen twice in a row, an interval apart, counts.
	seen := strings.Join(disagree, "; ")
	confirmed := seen != "" && seen == w.disagree && op.first == w.disagreeAt
	w.disagree, w.disagreeAt = seen, op.first
	if confirmed {
		return fmt.Errorf("%w: rank %d: device-path %s (rounds %d-%d): the ranks called different operations: %s",
			transport.ErrMismatch, s.rank, op.name(), op.first, op.last, strings.Join(disagree, "; "))
	}
	timeout := w.cfg.Timeout()
	if age < timeout {
		return nil
	}
	why := strings.Join(lag, "; ")
	switch {
	case rerr != nil:
		why = fmt.Sprintf("the flags could not be read: %v", rerr)
	case why == "":
		why = "every peer has finished it: this rank's own stream has not (is other work on it waiting?)"
	}
	return fmt.Errorf("%w: rank %d: device-path %s (rounds %d-%d) has been on the GPU for %v, beyond the communicator's timeout (%v): %s",
		transport.ErrTimeout, s.rank, op.name(), op.first, op.last, age.Round(time.Millisecond), timeout, why)
}

// finished reports whether the GPU has run op.
func (s *Shared) finished(op pendingOp) (done bool, err error) {
	err = s.d.Do(s.ctx, func() (err error) {
		done, err = s.d.EventDone(op.end)
		return err
	})
	return done, err
}

func (op pendingOp) name() string {
	if op.described {
		return op.desc.String()
	}
	return "operation"
}

// diagnose compares op with what each peer's slot of this rank's header says: the
// peers whose descriptor differs (each field named), and those that have not reached
// or not finished it.
func (s *Shared) diagnose(op pendingOp, hdr []uint32) (disagree, lag []string) {
	if own := hdr[s.rank*slotBytes/4+flagReadDone/4]; int32(own-op.last) >= 0 {
		// This rank's stream is past the operation (it writes its own header
		// first): a peer's slot may already hold its next operation's descriptor.
		return nil, nil
	}
	for p := range s.nranks {
		if p == s.rank {
			continue
		}
		w := hdr[p*slotBytes/4:]
		ready, readDone := w[flagReady/4], w[flagReadDone/4]
		arrived := int32(ready-op.first) >= 0
		past := int32(ready-op.last) > 0 // in a later operation: it agreed on this one
		switch {
		case !arrived:
			lag = append(lag, fmt.Sprintf("rank %d has not reached it (its last round is %d)", p, int32(max(ready, readDone))))
		case !past && int32(readDone-op.last) < 0:
			lag = append(lag, fmt.Sprintf("rank %d has not finished it (it reached round %d)", p, ready))
		}
		if !arrived || past || !op.described {
			continue
		}
		shape, count := w[descShape/4], w[descCount/4]
		if w[descShapeNeg/4] != -shape || w[descCountNeg/4] != -count {
			continue // released, or not all written yet
		}
		if diffs := op.desc.differences(decodeDesc(shape, count)); len(diffs) > 0 {
			disagree = append(disagree, fmt.Sprintf("rank %d differs in %s", p, strings.Join(diffs, ", ")))
		}
	}
	return disagree, lag
}

// readHeader reads this rank's header (its slots) from the host memory it lives in
// (hostflags.go): no stream is involved, so nothing queued can hold it up.
func (s *Shared) readHeader(*watch) ([]uint32, error) {
	return s.loadOwn(0, s.nranks*slotBytes), nil
}

// giveUp marks the scratch failed with err (once), releases this rank's streams and
// tells the communicator.
func (s *Shared) giveUp(w *watch, err error) {
	if !s.fail(err) {
		return
	}
	_ = s.releaseStreams()
	if w != nil && w.cfg.Fail != nil {
		w.cfg.Fail(err)
	}
}

// fail records err as why the device path of this rank stopped, and sets the abort word
// (shared.go) before any wait is released, so that the kernels queued on this rank's
// streams read no peer's memory when they run; false if it already had.
func (s *Shared) fail(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return false
	}
	s.failed, s.closed = err, true
	s.setAbort()
	return true
}

// releaseStreams writes, from the host, the values that satisfy every wait this rank's
// streams can have queued, into this rank's header and point-to-point flags (host
// memory the GPU maps: hostflags.go). A write queued on a stream could sit behind the
// very wait it must release, as the streams share the device's hardware queues.
func (s *Shared) releaseStreams() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.releaseLocked()
}

// releaseLocked is releaseStreams with s.mu held.
func (s *Shared) releaseLocked() error {
	if s.own == 0 || s.flags[s.rank].host == nil {
		return nil
	}
	poison := s.step + 1<<30
	for p := range s.nranks {
		for _, w := range []struct {
			off int
			v   uint32
		}{{flagReady, poison}, {flagReduced, poison}, {flagReadDone, poison}, {flagRing, s.ringSeq + 1<<30},
			{descShape, fieldMask}, {descShapeNeg, 0}, {descCount, fieldMask}, {descCountNeg, 0}} {
			s.storeOwn(s.flag(p, w.off), w.v)
		}
	}
	s.releaseP2P()
	return nil
}

// Abort gives up on the device path (communicator abort): this rank's streams still
// waiting on a flag are released, and so are the ones enqueued later if a peer
// overwrites the flags (by the watcher, until they have run); the memory stays
// mapped, as a peer's stream may still read it. The operations released have not
// produced valid outputs.
func (s *Shared) Abort(why error) {
	s.mu.Lock()
	w := s.watch
	s.mu.Unlock()
	if !s.fail(why) {
		return
	}
	_ = s.releaseStreams()
	if w != nil {
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// destroyEvents waits, up to deadline, for the GPU to have run every operation's
// events, then destroys them (Close: the streams are past the last round). s.mu held.
func (s *Shared) destroyEvents(deadline time.Time) error {
	var w waiter
	for {
		_, pending, err := s.reapLocked()
		if err != nil {
			return err
		}
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("the device operations' completion events did not complete in time")
		}
		w.Wait()
	}
	return s.d.Do(s.ctx, func() error {
		var errs []error
		for _, ev := range s.spare {
			errs = append(errs, s.d.EventDestroy(ev))
		}
		s.spare = nil
		return errors.Join(errs...)
	})
}

// Err is why this rank's device path stopped (the watcher gave up, or Abort), or nil.
func (s *Shared) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}
