package core

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"

	settings "github.com/gonccl/gonccl/internal/config"
	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/shm"
	"github.com/gonccl/gonccl/transport/tcp"
)

// Version is gonccl's version, "major.minor.patch", for the init log. Its one source
// is capi/gonccl.h (GONCCL_MAJOR, GONCCL_MINOR, GONCCL_PATCH): the C ABI sets it when
// libgonccl.so loads. Core on its own (its tests) says "dev".
var Version = "dev"

// Options tune a communicator at creation.
type Options struct {
	// Timeout bounds init and every operation; 0 means GONCCL_TIMEOUT_MS.
	Timeout time.Duration
	// Algo restricts the algorithms this communicator's cost model may pick, in
	// GONCCL_ALGO's syntax; "" keeps GONCCL_ALGO's restriction (if any). Every rank
	// must pass the same restriction (ranks that pick different algorithms fail their
	// operation with a mismatch error).
	Algo string
	// ChunkBytes is the pipelined chunk of ring and chain algorithms (at least 4096);
	// 0 keeps GONCCL_CHUNKSIZE. Every rank must pass the same value.
	ChunkBytes int
	// Epoch is the communicator's generation (see epoch.go): every rank must pass the
	// same one; a shrunken or reconfigured communicator has its parent's plus one.
	Epoch uint32

	test *testHooks // tests only: see testhooks.go
}

// Comm is one rank's end of a communicator: its links to the other ranks and the
// executor goroutine that runs its operations one at a time, in issue order.
type Comm struct {
	rank, nranks int
	cfg          *config
	logs         loggers
	peers        *peerSet        // links to the other ranks, made on demand (see peers.go)
	hosts        [][]int         // the ranks of each host (nil: unknown; see hostGroups)
	scratch      []byte          // mmap'd: receive staging for reductions
	scratchBytes int             // its size (Resume maps it again)
	work         []byte          // mmap'd, grown on demand: see workBuf
	sel          *selector       // the cost model: picks each operation's algorithm
	inlineMax    int             // exec.inlineMax: see inlineSendMax
	executorOnly bool            // waiters never run operations: see inline.go
	calOnce      sync.Once       // reads the estimator's calibration (calibration.go)
	cal          *calibration    // the estimator's fitted rates; nil: the built-in ones
	zc           *zcState        // zero-copy: peers' regions mapped here (see zerocopy.go); nil until used
	trace        *flightRecorder // recent operations (nil: off); see trace.go
	epoch        uint32          // the generation; see epoch.go
	guard        safego.Guard    // how its goroutines survive panics (see safety.go)

	// Per-peer frame headers and reduce sinks for the executor's operations (see exec).
	sendHdrs, recvHdrs []transport.Header
	sinks              []reduceSink

	// The queue of issued operations, bounded by GONCCL_QUEUE_DEPTH (back-pressure): an
	// issuer first takes a token in slots (blocking, without any lock, while the queue is
	// full), then sends on queue under mu, which therefore never blocks; the executor
	// gives a token back for every operation it takes out. closing wakes issuers that
	// wait for a token when the communicator is destroyed or aborted.
	queue    chan *op
	slots    chan struct{}
	closing  chan struct{}
	finished chan struct{} // closed when the executor has exited

	// Who runs the queued operations (see inline.go): the holder of runMu, the
	// executor or a waiter, takes them out one at a time and runs each to its end;
	// kick wakes the executor; queueClosed is set before queue is closed.
	runMu       sync.Mutex
	kick        chan struct{}
	queueClosed atomic.Bool

	p2p *p2pEngine // point-to-point messaging, beside the executor (nil: none)

	devSizes devSizeMatch // device-path send/recv sizes, compared (see devp2psize.go)

	mu          sync.Mutex
	timeout     time.Duration // of operations enqueued from now on (SetTimeout)
	seq         uint64
	closed      bool  // no more operations may be enqueued
	broken      error // first failure; later operations fail at once with it
	aborted     bool
	issuedOp    string                   // the last operation enqueued, described (for status reports)
	running     *op                      // the operation the executor runs now
	finishedSeq uint64                   // the last operation the executor finished
	brokenText  string                   // what broke the communicator, without peers' diagnoses
	lost        error                    // a rank is gone (see lost.go)
	lostRank    int                      // which, once lost is set
	lostCause   error                    // how it was lost (lost without the rank's name)
	lostNow     bool                     // the loss broke the communicator at once, or will no longer wait
	suspended   bool                     // Suspend ran, Resume not yet: operations are refused (suspend.go)
	ownRefused  map[uint64]bool          // numbers this rank refused (refuse.go)
	refusals    map[uint64]*refusalError // peers' refusals of numbers not finished here
	released    bool                     // its memory is freed (under runMu too)
	// news is closed when a cause is heard (see awaitCause); nil: nobody waits.
	news chan struct{}
}

// DeviceTopology, if set, returns lines describing this process's GPUs (names, PCI bus
// ids, NVLink peers, NUMA nodes) that each rank logs at INIT, or one line saying why
// there are none. libgonccl sets it to package cuda's reader (core must not import
// cuda); it is only called when INIT logs at INFO.
var DeviceTopology func() []string

// gomaxprocsOnce sizes the Go runtime once per process, by the first communicator.
var gomaxprocsOnce sync.Once

// NewComm joins the communicator identified by id as rank (of nranks). It blocks until
// every rank has joined and connected, or the timeout passes. Its steps (check the
// arguments, read the settings, listen, join the root, check that every rank was given
// the same options, connect the initial peers, start the communicator and its
// point-to-point channel) run once, in this order, and stay together so the order shows.
func NewComm(id UniqueID, nranks, rank int, opts Options) (*Comm, error) {
	start := time.Now()
	if nranks < 1 || nranks > MaxRanks {
		return nil, invalidf("nranks must be in 1..%d, got %d", MaxRanks, nranks)
	}
	if rank < 0 || rank >= nranks {
		return nil, invalidf("rank %d is out of range for nranks %d", rank, nranks)
	}
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = cfg.timeout
	}
	opts.test.apply(cfg)
	if opts.Algo != "" {
		if cfg.algo, err = parseAlgo(opts.Algo); err != nil {
			return nil, fmt.Errorf("the communicator's algorithm restriction: %w", err)
		}
		cfg.set = append(cfg.set, "algorithm restriction (communicator option) "+opts.Algo)
	}
	if opts.Epoch > transport.MaxEpoch {
		return nil, invalidf("the communicator's generation %d is beyond the largest, %d (each shrink or reconfigure adds one)", opts.Epoch, transport.MaxEpoch)
	}
	if opts.ChunkBytes != 0 {
		if opts.ChunkBytes < 4096 {
			return nil, invalidf("the communicator's chunk size must be at least 4096 bytes, got %d", opts.ChunkBytes)
		}
		cfg.chunkBytes = opts.ChunkBytes
		cfg.set = append(cfg.set, fmt.Sprintf("chunk size (communicator option) %d", opts.ChunkBytes))
	}
	logs := newLoggers(cfg, hostname(), rank)
	settings.Echo(logs.env, cfg.set)
	if rank == 0 {
		warnUnknown(logs.env, cfg.unknown)
		if opts.Timeout > 0 && opts.Timeout != cfg.timeout {
			warnTimeoutUnused(logs.env, cfg.set, opts.Timeout)
		}
	}
	logTLS(cfg.tls, logs)
	fail := func(err error) (*Comm, error) {
		return nil, &OpError{Rank: rank, Op: fmt.Sprintf("init (rank %d of %d)", rank, nranks), Peer: -1, Err: err}
	}
	ifc, err := selectInterface(cfg.socketIfname)
	if err != nil {
		return fail(err)
	}
	l, err := listen(ifc, cfg.portRange)
	if err != nil {
		return fail(err)
	}
	deadline := start.Add(timeout)
	me := rankInfo{Rank: rank, NRanks: nranks, Addr: l.Addr().String(), Host: hostIdentity(), Hostname: hostname(), Pid: os.Getpid(), PidNS: pidNamespace(), Shm: !cfg.shmDisable, Epoch: opts.Epoch,
		TimeoutMs: timeout.Milliseconds()}
	if opts.Algo != "" || opts.ChunkBytes != 0 {
		me.Opts = fmt.Sprintf("algorithm %q, chunk size %d", opts.Algo, opts.ChunkBytes)
	}
	ranks, err := joinRoot(&id, me, cfg.tls, deadline)
	if err != nil {
		l.Close()
		return fail(err)
	}
	for _, r := range ranks {
		if r.Opts != me.Opts {
			l.Close()
			return fail(invalidf("rank %d was given other communicator options than rank %d (%s against %s): every rank must pass the same algorithm restriction and chunk size",
				r.Rank, rank, describeOpts(r.Opts), describeOpts(me.Opts)))
		}
	}
	if cfg.test.meshListening != nil {
		cfg.test.meshListening(rank, l.Addr().String())
	}
	tcp.SetRetainLimit(cfg.linkBuffer)
	peers := newPeerSet(rank, opts.Epoch, ranks, id.secret(), cfg.tls, l, timeout, cfg.linkRetry, cfg.checksum, logs, cfg.guard(logs.net), cfg.test)
	if err := peers.connectInitial(deadline, cfg.runtimeConnect.lazy(nranks)); err != nil {
		peers.close()
		return fail(err)
	}
	c, err := newComm(rank, nranks, cfg, logs, peers, timeout)
	if err != nil {
		return fail(err)
	}
	c.epoch = opts.Epoch
	c.trace.setComm(commIDOf(&id))
	c.startP2P(nil)
	peers.attach(c.p2p.addPeer)
	if cfg.injectStale > 0 {
		c.injectStale(cfg.injectStale)
	}
	procs := sizeGoMaxProcs(cfg, ranks, me.Host)
	c.logInit(ifc, ranks, procs, time.Since(start))
	c.watchTerm()
	return c, nil
}

// describeOpts is rankInfo.Opts for an error message.
func describeOpts(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// newComm builds a communicator over peers and starts its executor.
func newComm(rank, nranks int, cfg *config, logs loggers, peers *peerSet, timeout time.Duration) (*Comm, error) {
	scratchBytes := max(cfg.chunkBytes, cfg.llThreshold, 4096)
	scratch, err := unix.Mmap(-1, 0, scratchBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		peers.close()
		return nil, fmt.Errorf("allocating %d bytes of scratch memory: %w", scratchBytes, err)
	}
	c := &Comm{
		rank: rank, nranks: nranks, cfg: cfg, logs: logs, peers: peers, scratch: scratch, scratchBytes: scratchBytes,
		timeout: timeout, queue: make(chan *op, cfg.queueDepth), slots: make(chan struct{}, cfg.queueDepth),
		closing: make(chan struct{}), finished: make(chan struct{}), kick: make(chan struct{}, 1),
	}
	c.hosts = hostGroups(peers.ranks)
	m := c.costModel()
	c.sel = newSelector(m, cfg.algo, logs)
	shm.SetCrowded(m.crowded()) // waits on other processes keep their processor only where cores are short
	c.inlineMax = inlineSendMax(m.crowded())
	c.executorOnly = m.waitsOutlastSleeps()
	if cfg.debugHops {
		EnableHops()
	}
	noSpin.Store(cfg.slowPath)
	c.sendHdrs, c.recvHdrs = make([]transport.Header, nranks), make([]transport.Header, nranks)
	c.sinks = make([]reduceSink, nranks)
	c.trace = newFlightRecorder(cfg.traceSize, rank, nranks, cfg.traceDir)
	c.guard = cfg.guard(logs.coll)
	c.guard.Go("executor", nil, c.executorDied, c.run)
	return c, nil
}

// sizeGoMaxProcs sets GOMAXPROCS once per process: GONCCL_GOMAXPROCS if set, else
// max(2, cores / ranks on this host), so that ranks sharing a host do not each spin up
// a thread per core. It returns the value in force.
func sizeGoMaxProcs(cfg *config, ranks []rankInfo, host string) int {
	gomaxprocsOnce.Do(func() {
		n := cfg.gomaxprocs
		if n == 0 {
			local := 0
			for _, ri := range ranks {
				if ri.Host == host {
					local++
				}
			}
			n = max(2, runtime.NumCPU()/max(1, local))
		}
		runtime.GOMAXPROCS(n)
	})
	return runtime.GOMAXPROCS(0)
}

func (c *Comm) logInit(ifc tcp.Interface, ranks []rankInfo, procs int, took time.Duration) {
	if !c.logs.init.Core().Enabled(zapcore.InfoLevel) {
		return
	}
	var peers []string
	for _, p := range c.peers.connected() {
		peers = append(peers, fmt.Sprintf("%d:%s(%s)", p, transportName(c.peers.linkIfAny(p)), ranks[p].Hostname))
	}
	sort.Strings(peers)
	if len(peers) == 0 && c.nranks > 1 {
		peers = []string{"none (GONCCL_RUNTIME_CONNECT)"}
	}
	c.logs.init.Info(fmt.Sprintf("gonccl %s rank %d/%d host %s pid %d: init done in %v; interface %s port %d; ring %d -> %d -> %d; peers connected at init %s (the others on first use); GOMAXPROCS %d (%d cores)",
		Version, c.rank, c.nranks, hostname(), os.Getpid(), took.Round(time.Millisecond), ifc, c.peers.l.Addr().(*net.TCPAddr).Port,
		(c.rank-1+c.nranks)%c.nranks, c.rank, (c.rank+1)%c.nranks, strings.Join(peers, " "), procs, runtime.NumCPU()))
	restrict := ""
	if len(c.cfg.algo) > 0 {
		restrict = "; GONCCL_ALGO allows " + c.cfg.algo.String()
	}
	c.logs.tune.Info(fmt.Sprintf("cost model: %d ranks, %s links (latency %.0fus, %.1f GB/s)%s",
		c.nranks, c.sel.m.link.name, c.sel.m.link.latencyUS, c.sel.m.link.bwGBs, restrict))
	for _, line := range c.sel.table() {
		c.logs.tune.Info(line)
	}
	if DeviceTopology != nil && c.logs.init.Core().Enabled(zapcore.InfoLevel) {
		for _, line := range DeviceTopology() {
			c.logs.init.Info(fmt.Sprintf("rank %d: %s", c.rank, line))
		}
	}
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.nranks }

// Timeout returns the time limit of operations enqueued from now on.
func (c *Comm) Timeout() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeout
}

// SetTimeout sets the time limit of the operations enqueued after it returns (a
// collective's runs from when the executor starts it, a send's or receive's from its
// call); operations already enqueued keep theirs. A d of zero or less is a deadline
// that has already passed (what a caller computing the time left before its own
// deadline may get): each operation enqueued with it times out at its first wait,
// with the usual ErrTimeout naming the peer it waited for; one that need not wait (a
// receive whose message has arrived) still completes.
func (c *Comm) SetTimeout(d time.Duration) error {
	d = max(d, 0)
	c.mu.Lock()
	c.timeout = d
	c.mu.Unlock()
	return nil
}

// enqueue validates nothing: callers check their arguments first. While the queue is
// full it blocks (back-pressure) until the executor takes an operation out, the
// operation timeout passes, or the communicator is destroyed or aborted; it holds no
// lock meanwhile.
func (c *Comm) enqueue(o *op, opts ...OpOption) (*Request, error) {
	o.stamp = hopNow()
	for _, opt := range opts {
		opt(o)
	}
	if err := c.takeSlot(o); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		<-c.slots // this caller's own token: never blocks
		return nil, fmt.Errorf("gonccl rank %d: %s: %w", c.rank, o.kind, ErrClosed)
	}
	if c.suspended {
		c.mu.Unlock()
		<-c.slots
		return nil, fmt.Errorf("gonccl rank %d: %s: %w", c.rank, o.kind, ErrSuspended)
	}
	c.seq++
	o.seq = c.seq
	o.timeout = c.timeout
	o.req = newRequest()
	o.req.owner = c
	if o.group != nil {
		o.part = o.group.add(o, time.Now().UnixNano())
	}
	c.issuedOp = o.String()
	c.trace.enqueued(o)
	o.stamp = hopEnd(HopEnqueue, o.stamp)
	// Sending under the lock keeps sequence numbers in queue order. It cannot block: the
	// queue holds at most as many operations as there are tokens taken, and this caller
	// holds one whose operation is not in the queue yet.
	select {
	case c.queue <- o:
	default:
		c.mu.Unlock()
		panic("gonccl: internal error: the operation queue is full although a slot was taken")
	}
	c.mu.Unlock()
	if !o.waited || noSpin.Load() || c.executorOnly {
		c.kickExecutor()
	}
	return o.req, nil
}

// takeSlot waits for room in the queue: a token in c.slots. It fails if the
// communicator closes meanwhile, or if the queue stays full for the operation timeout
// (the executor is stuck: a peer that does not call the same operations, say).
func (c *Comm) takeSlot(o *op) error {
	select {
	case c.slots <- struct{}{}:
		return nil
	default:
	}
	timeout := c.Timeout()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case c.slots <- struct{}{}:
		return nil
	case <-c.closing:
		err := ErrClosed
		if errors.Is(c.Err(), ErrAborted) {
			err = ErrAborted
		}
		return fmt.Errorf("gonccl rank %d: %s: while waiting for room in the operation queue: %w", c.rank, o.kind, err)
	case <-t.C:
		return &OpError{Rank: c.rank, Op: o.kind.String(), Peer: -1, Err: fmt.Errorf(
			"%w after %v waiting for room in the operation queue (%d operations queued, GONCCL_QUEUE_DEPTH): the operations ahead are not finishing; are all ranks calling the same collectives?",
			ErrTimeout, timeout, cap(c.slots))}
	}
}

// runOne runs o, taken out of the queue by the holder of c.runMu, and completes its
// request; with laterCallback, the request's completion callback runs on a goroutine
// of its own (see inline.go).
func (c *Comm) runOne(o *op, laterCallback bool) {
	<-c.slots // room for one more issuer
	started := hopEnd(HopQueue, o.stamp)
	err := c.recordRun(o)
	ran := hopEnd(HopRun, started)
	if o.hooks.After != nil {
		if aerr := c.guard.Run("op hook", func() error { return o.hooks.After(err) }); aerr != nil {
			if err == nil {
				err = &OpError{Rank: c.rank, Op: o.String(), Peer: -1, Err: aerr}
			} else {
				c.logs.coll.Warn(fmt.Sprintf("%s: after the failure: %v", o, aerr))
			}
		}
	}
	o.req.doneAt = hopEnd(HopFinish, ran)
	o.req.finish(err, laterCallback)
}

func (c *Comm) execute(o *op) error {
	c.mu.Lock()
	broken, aborted := c.broken, c.aborted
	refused := c.takeRefusalLocked(o.seq)
	c.running = o
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running, c.finishedSeq = nil, o.seq
		c.skipRefusedLocked()
		c.mu.Unlock()
	}()
	if aborted {
		return &OpError{Rank: c.rank, Op: o.String(), Peer: -1, Err: ErrAborted}
	}
	if broken != nil {
		return &OpError{Rank: c.rank, Op: o.String(), Peer: -1,
			Err: fmt.Errorf("communicator failed earlier and cannot be used: %w", broken)}
	}
	if refused != nil { // a peer will not make this call: nothing to wait for
		return c.failed(o, refused)
	}
	start := time.Now()
	e := &exec{
		rank: c.rank, nranks: c.nranks, peers: c.peers,
		hdr: transport.Header{Seq: o.seq, Kind: uint8(o.kind), DType: uint8(o.dtype), Root: int32(o.root),
			Count: o.wireCount(), Epoch: c.epoch},
		deadline: start.Add(o.timeout), timeout: o.timeout,
		scratch: c.scratch, chunkBytes: c.cfg.chunkBytes, inlineMax: c.inlineMax, breakLinks: c.failLinks, guard: c.guard,
		sendHdrs: c.sendHdrs, recvHdrs: c.recvHdrs, sinks: c.sinks,
	}
	err := c.guard.Run("collective", func() error {
		if o.hooks.Before != nil {
			if err := o.hooks.Before(e.deadline); err != nil {
				return err
			}
		}
		return c.dispatch(e, o)
	})
	// The buffers go back to the caller: links between hosts let go of what they sent
	// from them (see peerSet.settle).
	if serr := c.peers.settle(e.deadline); err == nil && serr != nil {
		err = serr
	}
	o.algo = Algo(e.hdr.Algo)
	if err == nil {
		c.zcLearned(e)
		c.logs.coll.Debug(o.String(), zap.String("algo", Algo(e.hdr.Algo).String()), zap.Duration("took", time.Since(start)))
		return nil
	}
	c.awaitCause(err)
	return c.failed(o, err)
}

// failed ends o, which failed with err: the communicator breaks (with the lost rank,
// if one is, as its cause), its links fail, and the error says where the other ranks
// stood. A peer's refusal of o's number (refuse.go), even one that arrives while the
// peers are asked where they stand, is the cause rather than the links it failed.
func (c *Comm) failed(o *op, err error) error {
	c.mu.Lock()
	hurry := c.lost != nil && !c.lostNow && !c.aborted
	if r := c.takeRefusalLocked(o.seq); r != nil {
		err = r
	}
	var refused *refusalError
	isRefusal := errors.As(err, &refused)
	lostKnown := false
	if c.lost != nil && !errors.Is(err, ErrInvalidArgument) && !isRefusal {
		err = c.lost // the links were failed because of it: name the cause
		lostKnown = true
	}
	if c.aborted {
		err = ErrAborted
	}
	aborted, breaks := c.aborted, c.broken == nil
	// A refusal, not the loss of the rank that refused and left, is what broke the
	// communicator, even where that loss was recorded first.
	if breaks || isRefusal && !aborted && c.lost != nil && c.lostRank == refused.rank {
		c.broken = err
		c.brokenText = truncate(fmt.Sprintf("%s: %v", o, err), 1024)
	}
	c.mu.Unlock()
	if hurry {
		c.lossFailedOp()
	}
	c.failLinks()
	oe := &OpError{Rank: c.rank, Op: o.String(), Peer: -1, Err: err}
	if !aborted && !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrNotSupported) && !isRefusal {
		wait := statusWait
		if lostKnown {
			wait = lostStatusWait
		}
		oe.Diagnosis = c.diagnose(o, err, wait)
		// The refusing rank's word comes on its channel, which the diagnosis has just
		// read up to its answer or its end: if it was behind the links' failure, it is
		// here now.
		c.mu.Lock()
		if r := c.takeRefusalLocked(o.seq); r != nil {
			oe.Err, oe.Diagnosis = r, ""
			if breaks || c.lost != nil && c.lostRank == r.rank {
				c.broken = r
				c.brokenText = truncate(fmt.Sprintf("%s: %v", o, r), 1024)
			}
		}
		c.mu.Unlock()
	}
	c.logs.coll.Warn(oe.logText())
	return oe
}

// failGrace is how long a failed communicator keeps sending the frames already under
// way, so that peers read them and diagnose the failure themselves (a mismatch is best
// explained by both sides) rather than seeing only a closed connection.
const failGrace = 250 * time.Millisecond

// failLinks shuts every link down after an error (see transport.Link.Fail).
func (c *Comm) failLinks() { c.peers.failAll(failGrace) }

// closeLinks closes every link and stops making new ones; blocked sends and receives
// return at once.
func (c *Comm) closeLinks() { c.peers.close() }

// Destroy waits for the operations already enqueued to finish, then closes the
// communicator. Further operations fail with ErrClosed.
func (c *Comm) Destroy() error {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	if !already {
		close(c.closing)
	}
	c.mu.Unlock()
	if already {
		return fmt.Errorf("gonccl rank %d: destroy: %w", c.rank, ErrClosed)
	}
	c.closeQueue()
	<-c.finished
	if c.Err() == nil {
		c.peers.linger() // the last bytes to peers on other hosts stay resendable until they have them
	}
	c.closeLinks()
	if c.p2p != nil {
		c.p2p.close(fmt.Errorf("gonccl rank %d: %w", c.rank, ErrClosed), c.leaving("destroyed"))
	}
	return c.freeScratch()
}

// Abort fails every pending operation at once, closes all connections and frees the
// communicator. It never blocks for long: an operation in progress is interrupted.
func (c *Comm) Abort() error {
	c.mu.Lock()
	already := c.closed
	c.closed, c.aborted = true, true
	if c.broken == nil {
		c.broken = ErrAborted
	}
	if !already {
		close(c.closing)
	}
	c.mu.Unlock()
	// Point-to-point first: its pending operations fail with ErrAborted and the peers
	// hear why, before closing the links makes them (and, through them, this rank's
	// own receives) see only a lost connection.
	if c.p2p != nil {
		c.p2p.close(ErrAborted, c.leaving("aborted"))
	}
	c.closeLinks()
	if already {
		return nil
	}
	c.closeQueue()
	<-c.finished
	return c.freeScratch()
}

func (c *Comm) freeScratch() error {
	c.zc.release()
	werr := c.freeWork()
	if c.scratch == nil {
		return werr
	}
	err := unix.Munmap(c.scratch)
	c.scratch = nil
	return errors.Join(err, werr)
}

// leaving says why this rank closes its communicator, for the peers (see sayBye).
func (c *Comm) leaving(how string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.brokenText != "" {
		return how + " after " + c.brokenText
	}
	return how
}

// Err returns the error that broke the communicator, or nil.
func (c *Comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if errors.Is(c.broken, ErrAborted) {
		return ErrAborted
	}
	return c.broken
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
