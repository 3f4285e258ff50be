package core

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/gonccl/gonccl/internal/safego"
)

// Every goroutine core starts goes through a safego.Guard (see package safego): a
// panic fails what the goroutine served instead of the process. The sites, by the
// name a panic reports (and GONCCL_TEST_INJECT_PANIC takes), and what a panic fails:
//
//	executor          the executor goroutine: the communicator, and every queued op
//	collective        one operation on the executor (algorithm, staging Before hook): that op, then the communicator
//	op hook           an operation's After hook on the executor: that op, then the communicator
//	inline op         an operation a waiter runs itself (inline.go), outside the guards above: that op, then the communicator
//	request callback  the completion callback of a waiter's own operation, run after the waiter returns: nothing (logged)
//	sendrecv sender   exec.sendRecv's sending goroutine: the op
//	pipeline sender   exec.pipeline's sending goroutine: the op
//	window sender     the same, for a pipeline with bounded staging (pipe.free): the op
//	direct sender     the direct algorithms' sending goroutine: the op
//	p2p reader        a peer's point-to-point reader: every p2p op with that peer
//	p2p writer        a peer's point-to-point writer: every p2p op with that peer
//	p2p send timer    a send's deadline timer: that send
//	p2p recv timer    a receive's deadline timer: that receive
//	heartbeat         the heartbeat goroutine: the communicator
//	lost rank break   breaking the communicator failGrace after a rank died (lost.go): the communicator
//	bootstrap root, bootstrap root accept, bootstrap root join: the root (ranks then fail init)
//	init connect      init's connection to one initial peer: init
//	peer dial         one connection dialled to a peer (init or on demand): that peer's link
//	peer accept       the accept loop of a rank's peer listener: connections on demand (logged)
//	peer handshake    one accepted connection: that connection (logged)
//	peer call         connecting to a lower rank that called: that peer's link
//
// and, in package transport/tcp, "tcp link sender" / "tcp link stripe" (a striped
// link's helper goroutine / one operation of it: the link), and in transport/shm "shm
// watcher" (a shared-memory link's liveness watcher: the link).

// guard returns the Guard for goroutines whose panics log to log.
func (cfg *config) guard(log *zap.Logger) safego.Guard {
	g := safego.Guard{Warn: func(msg string) { log.Warn(msg) }}
	if cfg != nil {
		g.Inject = cfg.injectPanic
	}
	return g
}

// parseInjectPanic reads GONCCL_TEST_INJECT_PANIC ("SITE" or "SITE@N"): a hook that
// panics on the N-th pass of SITE. Test-only.
func parseInjectPanic(v string) (func(site string), error) {
	if v == "" {
		return nil, nil
	}
	site, nth := v, int64(1)
	if i := strings.LastIndexByte(v, '@'); i >= 0 {
		n, err := strconv.ParseInt(v[i+1:], 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: GONCCL_TEST_INJECT_PANIC=%q: want SITE or SITE@N with N >= 1", ErrInvalidArgument, v)
		}
		site, nth = v[:i], n
	}
	return panicOnPass(site, nth), nil
}

// panicOnPass returns a hook that panics on the nth pass of site, once.
func panicOnPass(site string, nth int64) func(string) {
	var passes atomic.Int64
	return func(s string) {
		if s == site && passes.Add(1) == nth {
			panic(fmt.Sprintf("injected panic at %s (test hook)", site))
		}
	}
}

// executorDied handles a panic that escaped the executor's per-operation guard: it
// breaks the communicator with it and fails every operation still queued (and any
// enqueued until Destroy or Abort closes the queue), then lets Destroy and Abort go on.
func (c *Comm) executorDied(err error) {
	c.breakWith("executor", err)
	// Waiters that run operations themselves (inline.go) release runMu after each
	// turn; from here on nobody else takes an operation out.
	c.runMu.Lock()
	for o := range c.queue {
		<-c.slots // room for one more issuer, as run gives
		o.req.complete(&OpError{Rank: c.rank, Op: o.String(), Peer: -1,
			Err: fmt.Errorf("communicator failed earlier and cannot be used: %w", err)})
	}
	c.runMu.Unlock()
	c.unwatchTerm()
	close(c.finished)
}

// breakWith marks the communicator failed by err (what failed, for the peers' status
// reports) unless it already is, and shuts its collective links down, so that every
// later collective fails at once with err.
func (c *Comm) breakWith(what string, err error) {
	c.mu.Lock()
	if c.broken == nil {
		c.broken = err
		c.brokenText = truncate(fmt.Sprintf("%s: %v", what, err), 1024)
	}
	c.mu.Unlock()
	c.failLinks()
}

// heartbeatDied: without heartbeats a dead peer would go unnoticed until a deadline,
// so the communicator fails, collectives and point-to-point alike.
func (c *Comm) heartbeatDied(err error) {
	c.breakWith("heartbeat", err)
	if c.p2p != nil {
		c.p2p.failAll(err)
	}
}

// failAll fails every peer's point-to-point channel with err.
func (e *p2pEngine) failAll(err error) {
	for _, pp := range e.peers {
		if pp != nil {
			e.failPeer(pp, err)
		}
	}
}

// timerDied returns what a panic in the deadline timer of req (an operation with peer,
// or AnySource) does: the point-to-point state is suspect, so req fails with the panic,
// and so does every channel req could involve (draining what waits on them, req's own
// buffer included, so that nothing writes to it after it failed).
func (e *p2pEngine) timerDied(req *Request, peer int) func(error) {
	return func(err error) {
		if peer >= 0 && peer < len(e.peers) && e.peers[peer] != nil {
			e.failPeer(e.peers[peer], err)
		} else {
			e.failAll(err)
		}
		req.complete(err) // if no channel held it
	}
}
