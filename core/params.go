package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gonccl/gonccl/internal/cenv"
	"github.com/gonccl/gonccl/transport/tcp"
)

// Param is one GONCCL_* setting: its name, default, meaning and how it is parsed into
// a config. Params is the single list of them: loadConfig parses each, the INFO log
// echoes the ones that are set, and the README's table of variables is generated from
// it (TestReadmeVariableTable fails when the two differ; its -update flag rewrites the
// table).
type Param struct {
	Name string
	// Default is the value when unset, "" for none; Unset then says, for the README,
	// what happens when it is unset.
	Default, Unset string
	// Help is the README's text for it (Markdown).
	Help string
	// parse checks the value and stores it in c; nil: read elsewhere, only echoed here.
	parse func(c *config, name, v string) error
}

// Params lists every environment variable gonccl reads.
var Params = []Param{
	{"GONCCL_DEBUG", "WARN", "",
		"log level: `WARN`, `INFO` (one init summary per rank: version, rank/size, host, interface, ring order, transport per peer, GOMAXPROCS; then its GPUs, see [GPUs](#gpus)) or `TRACE` (one line per operation)",
		text(func(c *config, v string) { c.debug = strings.ToUpper(v) })},
	{"GONCCL_DEBUG_SUBSYS", "ALL", "",
		"subsystems to log: `INIT`, `COLL`, `NET`, `SHM`, `ENV`, `TUNING`, comma-separated; `^` excludes",
		text(func(c *config, v string) { c.debugSubsys = strings.ToUpper(v) })},
	{"GONCCL_DEBUG_HOPS", "0", "",
		"`1`: time each operation's hops (C++ issue, Go enqueue, queue, run, completion callback, waiter wake-up, completion) in this process; `python -m gonccl.bench --hops` sets it and prints the per-op means (C: `goncclDebugHops`)",
		zeroOne(func(c *config, on bool) { c.debugHops = on })},
	{"GONCCL_FAST_PATH", "1", "",
		"`0`: turn the small-op latency paths off: a waiter never runs its own op or completes its Work itself, and waits sleep at once instead of polling briefly (the path before issue 14; for comparisons, or hosts so oversubscribed that a bounded poll hurts). With `1`, a wait without a timeout of its own (a blocking C ABI call, `goncclRequestWait(-1)`, `Work.wait()` off Python's main thread) may run its op on the calling thread until the op ends; Python's main thread still waits in slices, so Ctrl-C gets through",
		zeroOne(func(c *config, on bool) { c.slowPath = !on })},
	{"GONCCL_SOCKET_IFNAME", "", "(auto)",
		"interfaces to use, NCCL's syntax: `eth` (prefix), `^docker,lo` (exclude), `=eth0` (exact). Auto: first up interface that is not loopback or a container bridge, else loopback",
		text(func(c *config, v string) { c.socketIfname = v })},
	{"GONCCL_TIMEOUT_MS", "1800000", "",
		"timeout for init and each operation when the caller gives none (torch passes its process-group timeout)",
		integer(1, 0, func(c *config, v int64) { c.timeout = time.Duration(v) * time.Millisecond })},
	{"GONCCL_CHUNKSIZE", "524288", "",
		"bytes per pipelined chunk (ring and chain)",
		integer(4096, 0, func(c *config, v int64) { c.chunkBytes = int(v) })},
	{"GONCCL_LL_THRESHOLD", "65536", "",
		"largest message (bytes) the one-shot direct all_reduce and all_gather may take; recursive doubling takes up to max(this, `GONCCL_CHUNKSIZE`)",
		integer(0, 0, func(c *config, v int64) { c.llThreshold = int(v) })},
	{"GONCCL_ALGO", "", "(cost model)",
		"restrict the algorithms the cost model may pick, in NCCL's syntax: `allreduce:ring`, `allreduce:ring,rd;broadcast:chain`, `^direct` (exclude). Choices: allreduce `rd`/`direct`/`ring`/`hier` (hierarchical, ranks on several hosts), broadcast `tree`/`chain`, reduce `tree`/`chain`, allgather `direct`/`ring`",
		func(c *config, _, v string) (err error) { c.algo, err = parseAlgo(v); return err }},
	{"GONCCL_GOMAXPROCS", "", "max(2, cores / local ranks)",
		"threads for the Go runtime in each rank",
		integer(1, 0, func(c *config, v int64) { c.gomaxprocs = int(v) })},
	{"GONCCL_CUDA_LIBRARY", "libcuda.so.1", "",
		"CUDA driver library to `dlopen` for device buffers through the C ABI (tests point it at the fake driver); read once per process. Absent or failing: CUDA unavailable, logged at `INFO`",
		nil},
	{"GONCCL_SHM_DISABLE", "0", "",
		"`1`: ranks on the same host (same hostname, boot id and network namespace) talk over TCP instead of shared memory. Default: their collective traffic goes through memfd rings; the INIT log shows `shm` or `tcp` per peer",
		zeroOne(func(c *config, on bool) { c.shmDisable = on })},
	{"GONCCL_HEARTBEAT_TIMEOUT_MS", "15000", "",
		"a peer from which nothing at all (data or heartbeat; each rank sends one on the point-to-point channel to every peer it has not written to for a while) arrives for this long is declared gone: hung, stopped, or its network cut. Collectives waiting on it fail at once, naming it. `0` turns heartbeats off",
		integer(0, 0, func(c *config, v int64) { c.heartbeatTimeout = time.Duration(v) * time.Millisecond })},
	{"GONCCL_TRACE_BUFFER_SIZE", "2000", "",
		"operations each communicator's flight recorder keeps (see \"Debugging hangs\"); `0` turns it off",
		integer(0, maxTraceSize, func(c *config, v int64) { c.traceSize = int(v) })},
	{"GONCCL_TRACE_DUMP_DIR", "", "(none)",
		"directory where every rank writes its flight recorder as JSON (`gonccl_trace_<comm>_rank<r>_pid<pid>.json`) when an operation first fails or times out, and again when the communicator is destroyed or aborted",
		text(func(c *config, v string) { c.traceDir = v })},
	{"GONCCL_QUEUE_DEPTH", "1024", "",
		"collectives one communicator holds queued (issued, not yet started) per rank. Issuing more blocks the calling thread (the GIL released) until the oldest start: back-pressure, so that any number of `async_op=True` calls can be issued before waiting. The wait is bounded by the operation timeout (a clear timeout error if the queue stays full, e.g. because a peer calls different collectives); destroying or aborting the communicator wakes it (1..1048576)",
		integer(1, maxQueueDepth, func(c *config, v int64) { c.queueDepth = int(v) })},
	{"GONCCL_SOCKET_NTHREADS", "1", "",
		"goroutines that send on the TCP connections to one peer (1..16); each drives `GONCCL_NSOCKS_PERTHREAD` connections in turn. Receiving, every connection has its own goroutine",
		integer(1, 0, func(c *config, v int64) { c.sockThreads = int(v) })},
	{"GONCCL_NSOCKS_PERTHREAD", "1", "",
		"TCP connections per sending goroutine (1..16). Connections per peer = `GONCCL_SOCKET_NTHREADS` x this, capped at 16 (past the cap each goroutine gets fewer), and the smaller of the two ends' products. Frames of 128 KiB and more are cut into stripes (at least 64 KiB each) that move over the connections in parallel; smaller ones use one. Pairs that talk through shared memory keep one connection",
		integer(1, 0, func(c *config, v int64) { c.socksPerThread = int(v) })},
	{"GONCCL_TEST_INJECT_PANIC", "", "(none)",
		"**Test only: never set it in production.** `SITE` or `SITE@N` makes the N-th pass (default the first) of one goroutine site of every communicator created afterwards panic, so tests can prove that a panic fails that operation (or its link, or the communicator) with an error naming it (`goncclInternalError`, a `DistBackendError` in Python) while the process lives on. Sites: `executor`, `collective`, `op hook`, `sendrecv sender`, `pipeline sender`, `window sender`, `direct sender`, `p2p reader`, `p2p writer`, `p2p send timer`, `p2p recv timer`, `heartbeat`, `shm setup`, `shm watcher`, `tcp link sender`, `tcp link stripe` and the bootstrap sites listed in core/safety.go",
		func(c *config, _, v string) (err error) { c.injectPanic, err = parseInjectPanic(v); return err }},
	{"GONCCL_TEST_INJECT_STALE", "0", "",
		"**Test only: never set it in production.** `COUNT` > 0 makes a rank that joins a communicator of generation (epoch) E > 0 first send every peer a frame of epoch E-1 shaped like an all_reduce of `COUNT` float32s (a late frame of the old generation, with a payload that would spoil a sum); the peers must drop and log it (tests/test_reconfigure.py)",
		integer(0, 1<<20, func(c *config, v int64) { c.injectStale = int(v) })},
}

// text parses a free-form setting.
func text(set func(c *config, v string)) func(*config, string, string) error {
	return func(c *config, _, v string) error { set(c, v); return nil }
}

// zeroOne parses a 0/1 setting.
func zeroOne(set func(c *config, on bool)) func(*config, string, string) error {
	return func(c *config, name, v string) error {
		if v != "0" && v != "1" {
			return fmt.Errorf("%w: %s=%q: expected 0 or 1", ErrInvalidArgument, name, v)
		}
		set(c, v == "1")
		return nil
	}
}

// integer parses an integer setting of at least least and, if most > 0, at most most;
// empty (no default) leaves 0.
func integer(least, most int64, set func(c *config, v int64)) func(*config, string, string) error {
	return func(c *config, name, s string) error {
		if s == "" {
			set(c, 0)
			return nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < least {
			return fmt.Errorf("%w: %s=%q is not an integer >= %d", ErrInvalidArgument, name, s, least)
		}
		if most > 0 && v > most {
			return fmt.Errorf("%w: %s=%d: at most %d", ErrInvalidArgument, name, v, most)
		}
		set(c, v)
		return nil
	}
}

// maxQueueDepth bounds GONCCL_QUEUE_DEPTH.
const maxQueueDepth = 1 << 20

// maxTraceSize bounds GONCCL_TRACE_BUFFER_SIZE (each slot is about 100 bytes).
const maxTraceSize = 1 << 20

// config holds the parsed settings for one communicator, read when it is created (so
// that variables a host program sets just before init take effect).
type config struct {
	debug, debugSubsys string
	debugHops          bool // GONCCL_DEBUG_HOPS
	slowPath           bool // GONCCL_FAST_PATH=0
	socketIfname       string
	timeout            time.Duration
	chunkBytes         int
	llThreshold        int
	algo               map[string][]string // GONCCL_ALGO: collective -> allowed algorithms
	gomaxprocs         int
	shmDisable         bool
	heartbeatTimeout   time.Duration // GONCCL_HEARTBEAT_TIMEOUT_MS; 0: off
	traceSize          int           // GONCCL_TRACE_BUFFER_SIZE
	traceDir           string        // GONCCL_TRACE_DUMP_DIR
	sockThreads        int           // sending goroutines per TCP peer
	socksPerThread     int           // connections each drives
	queueDepth         int           // GONCCL_QUEUE_DEPTH
	set                []string      // "NAME=value" for every variable the user set

	// injectPanic is a test hook, nil in production: called with the name of every
	// goroutine site as it starts (see safego.Guard.Inject). Tests set it directly;
	// GONCCL_TEST_INJECT_PANIC sets it for tests that run through the C ABI or Python.
	injectPanic func(site string)
	// injectStale is GONCCL_TEST_INJECT_STALE (tests only; 0 in production): see
	// Comm.injectStale.
	injectStale int
	// test holds the tests' hooks (see testhooks.go); all unset in production.
	test testHooks
}

func lookupParam(name string) (string, bool) {
	if v, ok := cenv.Lookup(name); ok && v != "" {
		return v, true
	}
	for _, p := range Params {
		if p.Name == name {
			return p.Default, false
		}
	}
	panic("gonccl: unknown parameter " + name)
}

// loadConfig parses every parameter, in Params' order, from the environment (or its
// default), and records the ones the user set.
func loadConfig() (*config, error) {
	c := &config{}
	for _, p := range Params {
		v, set := lookupParam(p.Name)
		if set {
			c.set = append(c.set, p.Name+"="+v)
		}
		if p.parse == nil {
			continue
		}
		if err := p.parse(c, p.Name, v); err != nil {
			return nil, err
		}
	}
	var err error
	c.sockThreads, c.socksPerThread, err = socketLayout(int64(c.sockThreads), int64(c.socksPerThread))
	if err != nil {
		return nil, err
	}
	return c, nil
}

// socketLayout checks the TCP connection layout to each peer and caps it, as NCCL
// does, at tcp.MaxSockets connections: past the cap, each thread gets fewer.
func socketLayout(threads, per int64) (int, int, error) {
	const most = tcp.MaxSockets
	if threads > most || per > most {
		return 0, 0, fmt.Errorf("%w: GONCCL_SOCKET_NTHREADS=%d, GONCCL_NSOCKS_PERTHREAD=%d: each must be 1..%d",
			ErrInvalidArgument, threads, per, most)
	}
	if threads*per > most {
		per = most / threads
	}
	return int(threads), int(per), nil
}
