package core

// A waiter runs its own operation. Handing a small operation to the executor goroutine
// costs a thread wake-up on the way in (tens of microseconds on a loaded host, more
// than the operation itself), and handing the result back another. So a goroutine that
// waits without a timeout of its own for a collective's request (Request.Wait(-1): a
// blocking C ABI call, goncclRequestWait(-1), the torch backend's wait() off Python's
// main thread) runs the queued operations itself, oldest first, up to and including its
// own, whenever nobody else is running one: the executor then is only the runner for
// operations nobody waits for yet (asynchronous ones). A wait with a timeout never
// does: it must come back when the timeout passes (Python's main thread waits in
// slices so that Ctrl-C gets through).
//
// Order stays issue order, one operation at a time, because operations leave the
// queue only in the hands of the holder of runMu, who runs each to its end before
// taking the next: the executor or one waiter at a time (the others wait for their
// requests as before). Whoever lets go of runMu with operations still queued, or with
// the queue closed, kicks the executor, so that none is left behind. A waiter that ran
// its own operation returns before the request's completion callback runs (on a
// goroutine of its own): the C++ backend's waiter then completes the Work itself and
// the callback finds nothing left to hand over. The flight
// recorder, frame headers (mismatch detection), hooks, slots (back-pressure) and
// panic guards are those of the executor's path: runOne is shared.
//
// A waiter that runs an operation cannot return before the operation ends (its
// deadline, or a peer's failure, ends it). GONCCL_FAST_PATH=0 turns this off.
//
// So does a host whose ranks outnumber its cores 8 to 1 or more (executorOnly): there
// a rank's waits for its peers outlast the 10 ms a raw sleep may last, and every 10 ms
// of waiting the waiting goroutine yields (after a sleep that timed out, or preempted
// by the runtime's monitor). A C caller's goroutine is locked to its thread, so each
// such yield hands the processor to another thread and back (four context switches);
// the executor's goroutine is not, and its yields find it again on the same thread at
// no cost. The two thread hand-offs per operation that the waiter saves are then the
// lesser cost: 256 processes on 2 cores, alternating in one run, a 1 MiB all_reduce
// took 0.40 s per operation against 0.51-0.73 s run by the waiters, 8 B 0.06-0.07 s
// against 0.08-0.12 s, with 0.93-0.97 million context switches in all against
// 1.3-2.3 million (bench/results/cpu-2026-12-08-crowded/).

// runInline runs queued operations on the caller's goroutine until r has finished, the
// queue is empty, or someone else is running them.
func (c *Comm) runInline(r *Request) {
	if noSpin.Load() || c.executorOnly {
		return
	}
	c.runQueued(r)
}

// run is the executor: it runs operations one at a time in issue order, taking turns
// with waiters that run them on their own threads. If it panics, executorDied takes
// over (and closes c.finished).
func (c *Comm) run() {
	hot := false
	for {
		c.awaitKick(hot)
		open, ran := c.runQueued(nil)
		if !open {
			break
		}
		hot = ran
	}
	c.unwatchTerm()
	c.autoDump("communicator closed")
	close(c.finished)
}

// runQueued takes runMu if it is free and runs queued operations, oldest first, until
// the queue is empty or until has finished (until nil: the executor, which runs them
// all). It reports false once the queue is closed and empty, and whether it ran any.
func (c *Comm) runQueued(until *Request) (open, ran bool) {
	if !c.runMu.TryLock() {
		return true, false
	}
	open = true
	defer func() {
		c.runMu.Unlock()
		if len(c.queue) > 0 || c.queueClosed.Load() {
			c.kickExecutor()
		}
	}()
	for until == nil || !until.fin.Load() {
		select {
		case o, ok := <-c.queue:
			if !ok {
				return false, ran
			}
			ran = true
			if until == nil {
				c.runOne(o, false)
			} else {
				c.runOneGuarded(o, o.req == until)
			}
		default:
			return true, ran
		}
	}
	return true, ran
}

// runOneGuarded is runOne on a waiter's goroutine: a panic that escapes the
// operation's own guards (see safety.go) fails the operation and the communicator,
// and the waiter goes on.
func (c *Comm) runOneGuarded(o *op, own bool) {
	err := c.guard.Run("inline op", func() error { c.runOne(o, own); return nil })
	if err != nil {
		c.breakWith("inline op", err)
		o.req.complete(&OpError{Rank: c.rank, Op: o.String(), Peer: -1, Err: err})
	}
}

// kickExecutor wakes the executor if it sleeps (a kick already pending will do).
func (c *Comm) kickExecutor() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// awaitKick waits for a kick. After a turn that ran operations it polls briefly
// before it sleeps (see spin.go), so that a stream of asynchronous operations finds
// the executor awake; after one that found a waiter running them it sleeps at once,
// leaving the core to the waiter (and its peers).
func (c *Comm) awaitKick(hot bool) {
	if hot {
		execSpin.spin(func() bool { return len(c.kick) > 0 })
	}
	<-c.kick
}

// closeQueue closes the queue and makes sure the executor sees it.
func (c *Comm) closeQueue() {
	c.queueClosed.Store(true)
	close(c.queue)
	c.kickExecutor()
}
