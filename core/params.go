package core

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gonccl/gonccl/internal/cenv"
	"github.com/gonccl/gonccl/transport"
)

// Param is one GONCCL_* setting: its name, default and meaning. Params is the single
// list of them; the INFO log echoes the ones that are set and the README's table
// documents each (a test keeps the two in step).
type Param struct {
	Name    string
	Default string
	Help    string
}

// Params lists every environment variable gonccl reads.
var Params = []Param{
	{"GONCCL_DEBUG", "WARN", "log level: WARN, INFO or TRACE (also VERSION: like INFO)"},
	{"GONCCL_DEBUG_SUBSYS", "ALL", "comma-separated subsystems to log (INIT, COLL, NET, SHM, ENV, ALL); ^ excludes"},
	{"GONCCL_DEBUG_HOPS", "0", "1: time each operation's hops (issue, queue, run, completion, wake-up) in this process, for gonccl.bench --hops (goncclDebugHops)"},
	{"GONCCL_FAST_PATH", "1", "0: waits sleep at once instead of polling briefly (the executor for the next operation, a waiter for its request) and a waiting thread never completes its op itself (the C++ completion thread always does): the path before issue 14, for comparisons, or for hosts so oversubscribed that even a bounded poll hurts"},
	{"GONCCL_SOCKET_IFNAME", "", "interfaces to use: name prefixes, ^ to exclude, = for exact names (NCCL's syntax)"},
	{"GONCCL_TIMEOUT_MS", "1800000", "default timeout in ms for init and every operation (torch passes its own)"},
	{"GONCCL_CHUNKSIZE", "524288", "bytes per pipelined chunk in ring and chain algorithms"},
	{"GONCCL_LL_THRESHOLD", "65536", "largest message (bytes) the one-shot direct all_reduce and all_gather may take; recursive doubling takes up to max(this, GONCCL_CHUNKSIZE)"},
	{"GONCCL_ALGO", "", "restrict the algorithms the cost model may pick, NCCL's syntax: allreduce:ring, allreduce:ring,rd;broadcast:chain, ^direct (choices: allreduce rd|direct|ring|hier, broadcast tree|chain, reduce tree|chain, allgather direct|ring)"},
	{"GONCCL_GOMAXPROCS", "", "GOMAXPROCS for the Go runtime; default max(2, cores / ranks on this host)"},
	{"GONCCL_SHM_DISABLE", "0", "1: ranks on one host talk over TCP instead of shared memory"},
	{"GONCCL_CUDA_LIBRARY", "libcuda.so.1", "CUDA driver library to dlopen for device buffers (package cuda reads it, once per process)"},
	{"GONCCL_HEARTBEAT_TIMEOUT_MS", "15000", "a peer from which nothing (not even a heartbeat) arrives for this long is declared gone (hung, stopped, or its network cut); 0: no heartbeats"},
	{"GONCCL_TRACE_BUFFER_SIZE", "2000", "operations each communicator's flight recorder keeps (0: off)"},
	{"GONCCL_TRACE_DUMP_DIR", "", "directory where each rank writes its flight recorder as JSON on the first failure and when the communicator closes"},
	{"GONCCL_SOCKET_NTHREADS", "1", "goroutines that send on the TCP connections to one peer (1..16)"},
	{"GONCCL_QUEUE_DEPTH", "1024", "operations one communicator queues before issuing more blocks the caller until the oldest finish (back-pressure; the operation timeout bounds the wait)"},
	{"GONCCL_NSOCKS_PERTHREAD", "1", "TCP connections each of those goroutines drives (1..16); connections per peer = product, at most 16"},
	{"GONCCL_TEST_INJECT_PANIC", "", "TEST ONLY, never set in production: SITE or SITE@N makes the N-th (default first) pass of that goroutine site of each communicator panic (e.g. collective@2), to prove a panic fails the operation, not the process; sites are listed in core/safety.go"},
	{"GONCCL_TEST_INJECT_STALE", "0", "TEST ONLY, never set in production: COUNT > 0 makes a rank joining a communicator of epoch E > 0 first send every peer a frame of epoch E-1 that looks like an all_reduce of COUNT float32s (a late frame of the old generation), which the peers must drop and log"},
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

func loadConfig() (*config, error) {
	c := &config{}
	str := func(name string) string {
		v, set := lookupParam(name)
		if set {
			c.set = append(c.set, name+"="+v)
		}
		return v
	}
	num := func(name string, min int64) (int64, error) {
		s := str(name)
		if s == "" {
			return 0, nil
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < min {
			return 0, fmt.Errorf("%w: %s=%q is not an integer >= %d", ErrInvalidArgument, name, s, min)
		}
		return v, nil
	}
	c.debug = strings.ToUpper(str("GONCCL_DEBUG"))
	c.debugSubsys = strings.ToUpper(str("GONCCL_DEBUG_SUBSYS"))
	switch v := str("GONCCL_DEBUG_HOPS"); v {
	case "0", "1":
		c.debugHops = v == "1"
	default:
		return nil, fmt.Errorf("%w: GONCCL_DEBUG_HOPS=%q: expected 0 or 1", ErrInvalidArgument, v)
	}
	switch v := str("GONCCL_FAST_PATH"); v {
	case "0", "1":
		c.slowPath = v == "0"
	default:
		return nil, fmt.Errorf("%w: GONCCL_FAST_PATH=%q: expected 0 or 1", ErrInvalidArgument, v)
	}
	c.socketIfname = str("GONCCL_SOCKET_IFNAME")
	ms, err := num("GONCCL_TIMEOUT_MS", 1)
	if err != nil {
		return nil, err
	}
	c.timeout = time.Duration(ms) * time.Millisecond
	chunk, err := num("GONCCL_CHUNKSIZE", 4096)
	if err != nil {
		return nil, err
	}
	c.chunkBytes = int(chunk)
	ll, err := num("GONCCL_LL_THRESHOLD", 0)
	if err != nil {
		return nil, err
	}
	c.llThreshold = int(ll)
	if c.algo, err = parseAlgo(str("GONCCL_ALGO")); err != nil {
		return nil, err
	}
	gmp, err := num("GONCCL_GOMAXPROCS", 1)
	if err != nil {
		return nil, err
	}
	c.gomaxprocs = int(gmp)
	str("GONCCL_CUDA_LIBRARY") // read by package cuda; looked up here so INFO echoes it
	switch v := str("GONCCL_SHM_DISABLE"); v {
	case "0", "1":
		c.shmDisable = v == "1"
	default:
		return nil, fmt.Errorf("%w: GONCCL_SHM_DISABLE=%q: expected 0 or 1", ErrInvalidArgument, v)
	}
	hb, err := num("GONCCL_HEARTBEAT_TIMEOUT_MS", 0)
	if err != nil {
		return nil, err
	}
	c.heartbeatTimeout = time.Duration(hb) * time.Millisecond
	ts, err := num("GONCCL_TRACE_BUFFER_SIZE", 0)
	if err != nil {
		return nil, err
	}
	if ts > maxTraceSize {
		return nil, fmt.Errorf("%w: GONCCL_TRACE_BUFFER_SIZE=%d: at most %d", ErrInvalidArgument, ts, maxTraceSize)
	}
	c.traceSize = int(ts)
	c.traceDir = str("GONCCL_TRACE_DUMP_DIR")
	threads, err := num("GONCCL_SOCKET_NTHREADS", 1)
	if err != nil {
		return nil, err
	}
	per, err := num("GONCCL_NSOCKS_PERTHREAD", 1)
	if err != nil {
		return nil, err
	}
	if c.sockThreads, c.socksPerThread, err = socketLayout(threads, per); err != nil {
		return nil, err
	}
	qd, err := num("GONCCL_QUEUE_DEPTH", 1)
	if err != nil {
		return nil, err
	}
	if qd > maxQueueDepth {
		return nil, fmt.Errorf("%w: GONCCL_QUEUE_DEPTH=%d: at most %d", ErrInvalidArgument, qd, maxQueueDepth)
	}
	c.queueDepth = int(qd)
	if c.injectPanic, err = parseInjectPanic(str("GONCCL_TEST_INJECT_PANIC")); err != nil {
		return nil, err
	}
	stale, err := num("GONCCL_TEST_INJECT_STALE", 0)
	if err != nil {
		return nil, err
	}
	if stale > 1<<20 {
		return nil, fmt.Errorf("%w: GONCCL_TEST_INJECT_STALE=%d: at most %d", ErrInvalidArgument, stale, 1<<20)
	}
	c.injectStale = int(stale)
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
