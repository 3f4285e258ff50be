package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gonccl/gonccl/internal/cenv"
	"github.com/gonccl/gonccl/transport"
)

// Param is one GONCCL_* setting: its name, default, meaning and how it is parsed into
// a config. Params is the single list of them: loadConfig parses each, the INFO log
// echoes the ones that are set, and the README's table documents each (a test keeps
// the two in step).
type Param struct {
	Name    string
	Default string
	Help    string
	parse   func(c *config, name, v string) error // nil: read elsewhere, only echoed here
}

// Params lists every environment variable gonccl reads.
var Params = []Param{
	{"GONCCL_DEBUG", "WARN", "log level: WARN, INFO or TRACE (also VERSION: like INFO)",
		text(func(c *config, v string) { c.debug = strings.ToUpper(v) })},
	{"GONCCL_DEBUG_SUBSYS", "ALL", "comma-separated subsystems to log (INIT, COLL, NET, SHM, ENV, ALL); ^ excludes",
		text(func(c *config, v string) { c.debugSubsys = strings.ToUpper(v) })},
	{"GONCCL_DEBUG_HOPS", "0", "1: time each operation's hops (issue, queue, run, completion, wake-up) in this process, for gonccl.bench --hops (goncclDebugHops)",
		flag(func(c *config, on bool) { c.debugHops = on })},
	{"GONCCL_FAST_PATH", "1", "0: waits sleep at once instead of polling briefly (the executor for the next operation, a waiter for its request) and a waiting thread never completes its op itself (the C++ completion thread always does): the path before issue 14, for comparisons, or for hosts so oversubscribed that even a bounded poll hurts",
		flag(func(c *config, on bool) { c.slowPath = !on })},
	{"GONCCL_SOCKET_IFNAME", "", "interfaces to use: name prefixes, ^ to exclude, = for exact names (NCCL's syntax)",
		text(func(c *config, v string) { c.socketIfname = v })},
	{"GONCCL_TIMEOUT_MS", "1800000", "default timeout in ms for init and every operation (torch passes its own)",
		integer(1, 0, func(c *config, v int64) { c.timeout = time.Duration(v) * time.Millisecond })},
	{"GONCCL_CHUNKSIZE", "524288", "bytes per pipelined chunk in ring and chain algorithms",
		integer(4096, 0, func(c *config, v int64) { c.chunkBytes = int(v) })},
	{"GONCCL_LL_THRESHOLD", "65536", "largest message (bytes) the one-shot direct all_reduce and all_gather may take; recursive doubling takes up to max(this, GONCCL_CHUNKSIZE)",
		integer(0, 0, func(c *config, v int64) { c.llThreshold = int(v) })},
	{"GONCCL_ALGO", "", "restrict the algorithms the cost model may pick, NCCL's syntax: allreduce:ring, allreduce:ring,rd;broadcast:chain, ^direct (choices: allreduce rd|direct|ring|hier, broadcast tree|chain, reduce tree|chain, allgather direct|ring)",
		func(c *config, _, v string) (err error) { c.algo, err = parseAlgo(v); return err }},
	{"GONCCL_GOMAXPROCS", "", "GOMAXPROCS for the Go runtime; default max(2, cores / ranks on this host)",
		integer(1, 0, func(c *config, v int64) { c.gomaxprocs = int(v) })},
	{"GONCCL_SHM_DISABLE", "0", "1: ranks on one host talk over TCP instead of shared memory",
		flag(func(c *config, on bool) { c.shmDisable = on })},
	{"GONCCL_CUDA_LIBRARY", "libcuda.so.1", "CUDA driver library to dlopen for device buffers (package cuda reads it, once per process)",
		nil},
	{"GONCCL_HEARTBEAT_TIMEOUT_MS", "15000", "a peer from which nothing (not even a heartbeat) arrives for this long is declared gone (hung, stopped, or its network cut); 0: no heartbeats",
		integer(0, 0, func(c *config, v int64) { c.heartbeatTimeout = time.Duration(v) * time.Millisecond })},
	{"GONCCL_TRACE_BUFFER_SIZE", "2000", "operations each communicator's flight recorder keeps (0: off)",
		integer(0, maxTraceSize, func(c *config, v int64) { c.traceSize = int(v) })},
	{"GONCCL_TRACE_DUMP_DIR", "", "directory where each rank writes its flight recorder as JSON on the first failure and when the communicator closes",
		text(func(c *config, v string) { c.traceDir = v })},
	{"GONCCL_SOCKET_NTHREADS", "1", "goroutines that send on the TCP connections to one peer (1..16)",
		integer(1, 0, func(c *config, v int64) { c.sockThreads = int(v) })},
	{"GONCCL_QUEUE_DEPTH", "1024", "operations one communicator queues before issuing more blocks the caller until the oldest finish (back-pressure; the operation timeout bounds the wait)",
		integer(1, maxQueueDepth, func(c *config, v int64) { c.queueDepth = int(v) })},
	{"GONCCL_NSOCKS_PERTHREAD", "1", "TCP connections each of those goroutines drives (1..16); connections per peer = product, at most 16",
		integer(1, 0, func(c *config, v int64) { c.socksPerThread = int(v) })},
	{"GONCCL_TEST_INJECT_PANIC", "", "TEST ONLY, never set in production: SITE or SITE@N makes the N-th (default first) pass of that goroutine site of each communicator panic (e.g. collective@2), to prove a panic fails the operation, not the process; sites are listed in core/safety.go",
		func(c *config, _, v string) (err error) { c.injectPanic, err = parseInjectPanic(v); return err }},
	{"GONCCL_TEST_INJECT_STALE", "0", "TEST ONLY, never set in production: COUNT > 0 makes a rank joining a communicator of epoch E > 0 first send every peer a frame of epoch E-1 that looks like an all_reduce of COUNT float32s (a late frame of the old generation), which the peers must drop and log",
		integer(0, 1<<20, func(c *config, v int64) { c.injectStale = int(v) })},
}

// text parses a free-form setting.
func text(set func(c *config, v string)) func(*config, string, string) error {
	return func(c *config, _, v string) error { set(c, v); return nil }
}

// flag parses a 0/1 setting.
func flag(set func(c *config, on bool)) func(*config, string, string) error {
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
// does, at transport.MaxSockets connections: past the cap, each thread gets fewer.
func socketLayout(threads, per int64) (int, int, error) {
	const most = transport.MaxSockets
	if threads > most || per > most {
		return 0, 0, fmt.Errorf("%w: GONCCL_SOCKET_NTHREADS=%d, GONCCL_NSOCKS_PERTHREAD=%d: each must be 1..%d",
			ErrInvalidArgument, threads, per, most)
	}
	if threads*per > most {
		per = most / threads
	}
	return int(threads), int(per), nil
}
