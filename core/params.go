package core

import (
	"fmt"
	"strings"
	"time"

	settings "github.com/gonccl/gonccl/internal/config"
	"github.com/gonccl/gonccl/transport/tcp"
)

// Params lists every environment variable gonccl reads, as rows of the settings
// registry (internal/config) that fill core's config: loadConfig parses each, the INFO
// log echoes the ones that are set, and docs/environment.md's tables of variables are
// generated from it (TestEnvironmentDoc fails when the two differ; its -update flag
// rewrites them; params_doc.go groups them).
var Params = []settings.Param[config]{
	{Name: "GONCCL_DEBUG", Default: "WARN",
		Help:  "log level, in any case: `WARN` (failures only), `INFO` (one init summary per rank: version, rank/size, host, interface, ring order, transport per peer, GOMAXPROCS; then its GPUs, see [GPUs](gpu.md)) or `TRACE` (one line per operation). Lines go to stderr, or to `GONCCL_DEBUG_FILE`",
		Parse: oneOf(settings.Levels, func(c *config, v string) { c.debug = v })},
	{Name: "GONCCL_DEBUG_SUBSYS", Default: "ALL",
		Help:  "subsystems to log: `INIT`, `COLL`, `NET`, `SHM`, `ENV`, `TUNING` or `ALL`, comma-separated, in any case; a leading `^` logs all but those listed",
		Parse: parseSubsys},
	{Name: "GONCCL_DEBUG_FILE", Unset: "(stderr)",
		Help:  "a file to write the log lines to instead of stderr, as NCCL's `NCCL_DEBUG_FILE`: `%h` in it is replaced by the host name, `%p` by the process id (`%%`: a percent sign), so `/tmp/gonccl.%h.%p.log` gives each rank its own file. Appended to; a file that cannot be opened is named in a warning on stderr, where the lines then go",
		Parse: parseDebugFile},
	{Name: "GONCCL_DEBUG_HOPS", Default: "0",
		Help:  "`1`: time each operation's hops (C++ issue, Go enqueue, queue, run, completion callback, waiter wake-up, completion; on the device path, issue -> on the stream) in this process; `python -m gonccl.bench --hops` sets it and prints the per-op means (C: `goncclDebugHops`)",
		Parse: zeroOne(func(c *config, on bool) { c.debugHops = on })},
	{Name: "GONCCL_FAST_PATH", Default: "1",
		Help:  "`0`: turn the small-op latency paths off: a waiter never runs its own op or completes its Work itself, and waits sleep at once instead of polling briefly (for comparisons, or hosts so oversubscribed that a bounded poll hurts). With `1`, a wait without a timeout of its own (a blocking C ABI call, `goncclRequestWait(-1)`, `Work.wait()` off Python's main thread) may run its op on the calling thread until the op ends; Python's main thread still waits in slices, so Ctrl-C gets through",
		Parse: zeroOne(func(c *config, on bool) { c.slowPath = !on })},
	{Name: "GONCCL_UNKNOWN_ENV", Default: "warn",
		Help:  "what a `GONCCL_*` variable that is none of those on this page (a misspelt name, which would otherwise be ignored) does: `warn` (rank 0 logs a `WARN` naming it and the closest known name, such as `GONCCL_TIMOUT_MS is not a setting gonccl knows (did you mean GONCCL_TIMEOUT_MS?)`, once per process) or `error` (init fails, naming it)",
		Parse: oneOf([]string{"warn", "error"}, func(c *config, v string) { c.unknownIsError = v == "error" })},
	{Name: "GONCCL_SOCKET_IFNAME", Unset: "(auto)",
		Help:  "interfaces to use, NCCL's syntax: `eth` (prefix), `^docker,lo` (exclude), `=eth0` (exact). Auto: first up interface that is not loopback or a container bridge, else loopback. On the interface chosen, gonccl listens on its first IPv4 address, else on its first IPv6 address that is not link-local (a global or unique local one, such as `fd00::5`), so IPv6-only hosts need no other setting; every rank must reach the others' addresses, so a job's hosts use one family. torch's store is reached at `MASTER_ADDR` as it is given (an IPv6 address there, without brackets: `MASTER_ADDR=fd00::1`)",
		Parse: text(func(c *config, v string) { c.socketIfname = v })},
	{Name: "GONCCL_PORT_RANGE", Unset: "(ports the kernel picks)",
		Help:  "`lo-hi`: every port gonccl listens on (each rank's listener for its peers, and the bootstrap listener of the process that makes the unique id) is taken from these ports, inclusive, so a firewall or network policy between hosts need only open them. The processes of a host share the range, each passing over ports in use, so it needs at least one port per rank on the host, and one more on the host that makes the unique id; when every port is taken, init fails naming this setting. Connections a rank makes to others still leave from ports the kernel picks. Unset: ports the kernel picks",
		Parse: parsePortRange},
	{Name: "GONCCL_TIMEOUT_MS", Default: "1800000",
		Help:  "the timeout of init and of each operation for a caller that gives none: the C ABI's `goncclCommInitRank` (and the bootstrap root that `goncclGetUniqueId` starts, until a rank says its own). Under torch it does not apply: torch always gives the group's timeout, `timeout=` of `init_process_group` or `new_group` (30 minutes unless given), which bounds the group's init and every operation; rank 0 warns when `GONCCL_TIMEOUT_MS` is set there. A timeout's error states the time actually waited",
		Parse: integer(1, 0, func(c *config, v int64) { c.timeout = time.Duration(v) * time.Millisecond })},
	{Name: "GONCCL_CHUNKSIZE", Default: "524288",
		Help:  "bytes per pipelined chunk (ring and chain)",
		Parse: integer(4096, 0, func(c *config, v int64) { c.chunkBytes = int(v) })},
	{Name: "GONCCL_LL_THRESHOLD", Default: "65536",
		Help:  "largest message (bytes) the one-shot direct all_reduce and all_gather may take; recursive doubling takes up to max(this, `GONCCL_CHUNKSIZE`)",
		Parse: integer(0, 0, func(c *config, v int64) { c.llThreshold = int(v) })},
	{Name: "GONCCL_ALGO", Unset: "(cost model)",
		Help:  "restrict the algorithms the cost model may pick, in NCCL's syntax: `allreduce:ring`, `allreduce:ring,rd;broadcast:chain`, `^direct` (exclude). Choices: " + algoChoices(),
		Parse: func(c *config, _, v string) (err error) { c.algo, err = parseAlgo(v); return err }},
	{Name: "GONCCL_CALIBRATION", Unset: "`~/.cache/gonccl/calibration.json`",
		Help: "the file of measured times the time estimator (`dist._time_estimator`, `goncclCommEstimate`) fits its rates to: `python -m gonccl.bench --calibrate -np N` writes an entry per host, number of ranks and transport (`shm` or `tcp`). Read at a communicator's first estimate; a missing file, or one without an entry for the communicator, leaves the built-in rates (logged at `INFO`, subsystem `TUNING`; a garbled one at `WARN`). Algorithm choice never depends on it. `none`: the built-in rates",
		Parse: text(func(c *config, v string) {
			switch v {
			case "":
				c.calibration = DefaultCalibrationPath()
			case "none":
				c.calibration = ""
			default:
				c.calibration = v
			}
		})},
	{Name: "GONCCL_GOMAXPROCS", Unset: "max(2, cores / local ranks)",
		Help:  "threads for the Go runtime in each rank",
		Parse: integer(1, 0, func(c *config, v int64) { c.gomaxprocs = int(v) })},
	{Name: "GONCCL_CUDA_LIBRARY", Default: "libcuda.so.1",
		Help:  "CUDA driver library to `dlopen` for device buffers through the C ABI (tests point it at the fake driver); read once per process. Absent or failing: CUDA unavailable, logged at `INFO`",
		Parse: text(nil)},
	{Name: "GONCCL_DEVICE_PATH", Default: "auto",
		Help:  "which path operations on CUDA device buffers take (see [GPUs](gpu.md#defaults-and-what-has-run-on-a-gpu) and [how auto chooses](gpu.md#how-auto-chooses)). `auto`: at a communicator's first operation on device buffers the ranks agree on their setup (one rank; ranks sharing a GPU, with or without MPS; one rank per GPU, with or without NVLink) and take only the paths that have passed the GPU check on real hardware for it, today the staged path (through pinned host memory, one copy each way) everywhere; the INIT log says the path, where it was proven and how to ask for the others. `model`: the same agreement, then every path possible there that the cost model chooses for some operation and size: the device path (the ranks map each other's device scratch with CUDA IPC and the work is enqueued on the caller's stream: copies, reduction kernels, flags ordering the ranks, returning at once; ranks on this host, on GPUs that can share memory), the same-GPU path (every rank on one GPU: one rank enqueues the whole `all_reduce`, `all_gather`, `reduce_scatter` or `broadcast`, the ranks' streams ordering each other so that calls return before the kernels run; for one rank, a device-to-device copy), and staged, pipelined by chunk (always); each collective takes the one the model prices lowest for its kind and size (`GONCCL_DEVICE_PATH_COST`). `samegpu`: ranks all on one GPU take the same-GPU path for its four collectives at every size and stage the rest; otherwise the device path unless two ranks share a GPU. `1`: the device path also when ranks share a GPU. `0`: always staged. A path any rank cannot set up is left out by every rank, and the INIT log names the rank and why. The same on every rank; another value is refused at init. Read by the C ABI when a communicator is created",
		Parse: oneOf([]string{"auto", "model", "samegpu", "1", "0"}, func(c *config, v string) { c.device.Path = v })},
	{Name: "GONCCL_DEVICE_PATH_COST", Unset: "(measured and estimated figures)",
		Help:  "changes figures of the cost model by which `GONCCL_DEVICE_PATH=auto` and `model` choose a path per operation: `key=value` pairs, comma-separated, e.g. `staged.latency=300,samegpu.busbw=400`; latencies in microseconds, bandwidths in GB/s of bus bandwidth; the keys and defaults are in [how auto chooses](gpu.md#how-auto-chooses). The same on every rank (the setup exchange checks, and refuses a difference at the first operation on device buffers, as it does a key or value it does not know). Read by the C ABI when a communicator is created",
		Parse: parseCostSyntax},
	{Name: "GONCCL_DEVICE_SCRATCH", Default: "8388608",
		Help:  "bytes of device scratch each rank of a device-path communicator allocates and shares (a `K`, `M` or `G` suffix: 2^10, 2^20, 2^30; 1M to 16G); an operation larger than it takes several rounds, and each round costs a wait on the peers (about 0.5 ms when ranks share a GPU). The same on every rank. Read by the C ABI",
		Parse: byteSize(1<<20, 16<<30, func(c *config, v int64) { c.device.Scratch = int(v) })},
	{Name: "GONCCL_DEVICE_RING_THRESHOLD", Default: "4194304",
		Help:  "bytes (per rank: an `all_reduce`'s buffer, a `reduce_scatter`'s input) from which an `all_reduce` or `reduce_scatter` on the device path among three or more ranks runs a ring (each step reads one chunk of the previous rank's scratch and reduces it into the own, passing the finished pieces on: every rank talks to its two neighbours only) instead of every rank reading every peer's scratch at once (a `K`, `M` or `G` suffix: 2^10, 2^20, 2^30). `0`: never. The same on every rank (ranks that differ are named at the operation). Read by the C ABI",
		Parse: byteSize(0, 16<<30, func(c *config, v int64) { c.device.RingThreshold = int(v) })},
	{Name: "GONCCL_STAGED_CHUNK", Unset: "(0; 4194304 under `GONCCL_DEVICE_PATH=model`)",
		Help:  "bytes per chunk of the staged path (device buffers copied through pinned host memory; a `K`, `M` or `G` suffix: 2^10, 2^20, 2^30; up to 16G): a collective larger than one chunk runs pipelined, not yet run on a GPU, so only when asked for (by this setting, or `GONCCL_DEVICE_PATH=model`), or where the GPU check has proven it for the ranks' setup; the copies of other chunks to and from the GPU overlapping the host's work on one (at most 64 chunks: larger operations take larger chunks). The flight recorder shows it as one entry, with its number of chunks. `0`: no pipelining. The same on every rank. Read by the C ABI",
		Parse: stagedChunk},
	{Name: "GONCCL_STAGED_PINNED", Default: "67108864",
		Help:  "bytes of pinned host memory one pipelined staged operation holds at once (`K`, `M`, `G` suffixes as above; up to 1024G): its chunks' memory is a ring of as many chunks as fit (at least two, whatever this says), a chunk copied to the host once the chunk before it in its slot is back on the GPU. Inputs, results and (reducing on the GPU) the pieces received all count. `0`: no bound (every chunk's memory at once). Read by the C ABI",
		Parse: byteSize(0, 1<<40, func(c *config, v int64) { c.device.StagedPinned = int(v) })},
	{Name: "GONCCL_STAGED_REDUCE", Default: "gpu",
		Help:  "where the staged path's pipelined `all_reduce`, `reduce_scatter` and `reduce` (several chunks of `GONCCL_STAGED_CHUNK`, several ranks) reduce: `gpu` (an all-to-all on the host brings each rank the peers' pieces of its part, gonccl's reduction kernels fold them on the device; `all_reduce` then gathers the reduced shards with another) or `cpu` (core's host algorithm on each chunk). The same on every rank. Read by the C ABI",
		Parse: oneOf([]string{"gpu", "cpu"}, func(c *config, v string) { c.device.StagedReduce = v })},
	{Name: "GONCCL_P2P_DISABLE", Default: "0",
		Help:  "`1`: never take the device path, whatever `GONCCL_DEVICE_PATH` says; device buffers are staged through pinned host memory (as NCCL's `NCCL_P2P_DISABLE` turns its GPU-to-GPU transport off). Read by the C ABI",
		Parse: zeroOne(func(c *config, on bool) { c.device.P2PDisable = on })},
	{Name: "GONCCL_SHM_DISABLE", Default: "0",
		Help:  "`1`: ranks on the same host (same hostname, boot id and network namespace) talk over TCP instead of shared memory. Default: their collective traffic goes through memfd rings; the INIT log shows `shm` or `tcp` per peer",
		Parse: zeroOne(func(c *config, on bool) { c.shmDisable = on })},
	{Name: "GONCCL_ZEROCOPY", Default: "1",
		Help:  "`1`: an `all_reduce`, `all_gather`, `reduce_scatter` or `broadcast` of at least `GONCCL_ZEROCOPY_THRESHOLD` bytes among ranks of one host whose buffers every rank allocated in gonccl's shared memory (`allocate_tensor`, `goncclMemAlloc`) runs on those buffers where they lie: each rank reads its peers' inputs and writes their results in place, with no copy through the shared-memory rings (the ranks first tell each other where their buffers are, along a binomial tree; if any rank's buffer is ordinary memory, every rank takes the usual path, and the next operation of the same kind does so at once, learning from the flags on its frames whether the one after may try again). Up to 32 ranks on the host. `0`: such buffers are treated like any other. The same on every rank",
		Parse: zeroOne(func(c *config, on bool) { c.zeroCopy = on })},
	{Name: "GONCCL_ZEROCOPY_THRESHOLD", Default: "1048576",
		Help:  "smallest collective (bytes: the whole buffer of `all_reduce` and `broadcast`, every rank's blocks together for `all_gather` and `reduce_scatter`) for which the ranks of one host check whether they can run it zero-copy (see `GONCCL_ZEROCOPY`): one round of small messages along a binomial tree, and none for a kind of operation already found on ordinary memory. From 1 MiB on, zero-copy measured faster than the usual path at 2, 4 and 8 ranks; below it, not at every rank count. The same on every rank",
		Parse: integer(0, 0, func(c *config, v int64) { c.zeroCopyMin = int(v) })},
	{Name: "GONCCL_HEARTBEAT_TIMEOUT_MS", Default: "15000",
		Help:  "a peer from which nothing at all (data or heartbeat; each rank sends one on the point-to-point channel to every peer it has not written to for a while) arrives for this long is declared gone: hung, stopped, or its network cut. Collectives waiting on it fail at once, naming it. `0` turns heartbeats off",
		Parse: integer(0, 0, func(c *config, v int64) { c.heartbeatTimeout = time.Duration(v) * time.Millisecond })},
	{Name: "GONCCL_LINK_RETRY_MS", Default: "10000",
		Help:  "a TCP connection between ranks that breaks while both processes live (reset or aborted by something between the hosts) is made again, authenticated as at first, and resumes with no byte lost, if the peer answers within this window; past it, the link fails naming the rank. Below `GONCCL_HEARTBEAT_TIMEOUT_MS` by default, so that a peer is given up no later than before; above it, the heartbeat waits for the window while the link is reconnecting (a network that goes silent for longer, such as a switch reboot), and a dead host takes that long to be named. `0`: no reconnects (see [Fault tolerance](fault-tolerance.md#network-faults))",
		Parse: integer(0, 0, func(c *config, v int64) { c.linkRetry = time.Duration(v) * time.Millisecond })},
	{Name: "GONCCL_LINK_BUFFER_MB", Default: "64",
		Help:  "MiB a process may hold as copies of bytes it sent to ranks on other hosts that they have not yet acknowledged, for resending after a broken connection (every session together). Collectives keep what they send in their own buffers until it is acknowledged or they end, so only what is still unacknowledged when an operation ends is copied (little: acknowledgements come back as the peer reads); a writer whose copies do not fit waits for acknowledgements instead, up to its timeout. The default fits 64 ranks on a host in 4 GiB",
		Parse: integer(1, 1<<20, func(c *config, v int64) { c.linkBuffer = v << 20 })},
	{Name: "GONCCL_RUNTIME_CONNECT", Default: "auto",
		Help:  "when ranks connect to each other, as NCCL's `NCCL_RUNTIME_CONNECT`: `1`: each pair on its first operation together, so init is only the exchange of addresses through rank 0; `0`: each rank also connects its ring neighbours and binary-tree parent and children during init, so that init fails on a peer it cannot reach and heartbeats watch those peers from the start; `auto`: `0` up to 64 ranks, `1` beyond, where the connections made during init were most of its time (every rank waited for its neighbours to be scheduled; see [Performance](performance.md#scale-many-ranks)). Either way a pair that never talks never connects",
		Parse: oneOf([]string{"auto", "0", "1"}, func(c *config, v string) { c.runtimeConnect = runtimeConnect(v) })},
	{Name: "GONCCL_CHECKSUM", Default: "0",
		Help:  "`1`: the bytes of every TCP connection between ranks that do not share memory travel in records of at most 1 MiB with a CRC32C each, checked before any of it is used: a record corrupted on the way (which TCP's 16-bit checksum can miss) is resent over a resumed connection, or, with `GONCCL_LINK_RETRY_MS=0` or after 16 in a row with no good record between them, fails the link naming the rank. The dialling rank of each pair (the higher) decides for the pair's connections: set it alike everywhere",
		Parse: zeroOne(func(c *config, on bool) { c.checksum = on })},
	{Name: "GONCCL_TRACE_BUFFER_SIZE", Default: "2000",
		Help:  "operations each communicator's flight recorder keeps (see [Troubleshooting](troubleshooting.md#hangs-and-the-flight-recorder)); `0` turns it off",
		Parse: integer(0, maxTraceSize, func(c *config, v int64) { c.traceSize = int(v) })},
	{Name: "GONCCL_TRACE_DUMP_DIR", Unset: "(none)",
		Help:  "directory where every rank writes its flight recorder as JSON (`gonccl_trace_<comm>_rank<r>_pid<pid>.json`) when an operation first fails or times out, again when the communicator is destroyed or aborted, and when the process gets SIGTERM (unless the program handles SIGTERM itself)",
		Parse: text(func(c *config, v string) { c.traceDir = v })},
	{Name: "GONCCL_QUEUE_DEPTH", Default: "1024",
		Help:  "collectives one communicator holds queued (issued, not yet started) per rank. Issuing more blocks the calling thread (the GIL released) until the oldest start: back-pressure, so that any number of `async_op=True` calls can be issued before waiting. The wait is bounded by the operation timeout (a clear timeout error if the queue stays full, e.g. because a peer calls different collectives); destroying or aborting the communicator wakes it (1..1048576)",
		Parse: integer(1, maxQueueDepth, func(c *config, v int64) { c.queueDepth = int(v) })},
	{Name: "GONCCL_SOCKET_NTHREADS", Default: "1",
		Help:  "goroutines that send on the TCP connections to one peer (1..16); each drives `GONCCL_NSOCKS_PERTHREAD` connections in turn. Receiving, every connection has its own goroutine",
		Parse: integer(1, 0, func(c *config, v int64) { c.sockThreads = int(v) })},
	{Name: "GONCCL_NSOCKS_PERTHREAD", Default: "1",
		Help:  "TCP connections per sending goroutine (1..16). Connections per peer = `GONCCL_SOCKET_NTHREADS` x this, capped at 16 (past the cap each goroutine gets fewer), and the smaller of the two ends' products. Frames of 128 KiB and more are cut into stripes (at least 64 KiB each) that move over the connections in parallel; smaller ones use one. Pairs that talk through shared memory keep one connection",
		Parse: integer(1, 0, func(c *config, v int64) { c.socksPerThread = int(v) })},
	{Name: "GONCCL_TLS", Default: "0",
		Help:  "`1`: every TCP connection (bootstrap, collectives, point-to-point, connections made on demand) is TLS 1.3 with mutual certificate verification against `GONCCL_TLS_CA`, the communicator's secret still proven inside it; shared memory between ranks on one host is unchanged. Every rank must agree: a rank with another setting, or whose certificate the CA did not sign, is refused at connect, both sides naming it (see docs/security.md). Certificates that cannot be read, have expired or do not match the key fail init. Read at init",
		Parse: zeroOne(func(c *config, on bool) { c.tlsOn = on })},
	{Name: "GONCCL_TLS_CERT", Unset: "(none)",
		Help:  "with `GONCCL_TLS=1`: this rank's certificate, a PEM file (intermediate certificates may follow it)",
		Parse: text(func(c *config, v string) { c.tlsCert = v })},
	{Name: "GONCCL_TLS_KEY", Unset: "(none)",
		Help:  "with `GONCCL_TLS=1`: the certificate's private key, a PEM file",
		Parse: text(func(c *config, v string) { c.tlsKey = v })},
	{Name: "GONCCL_TLS_CA", Unset: "(none)",
		Help:  "with `GONCCL_TLS=1`: the PEM bundle of CA certificates a peer's certificate must chain to (host names are not checked: any certificate the CA signed is accepted, and its names are logged at `INFO`)",
		Parse: text(func(c *config, v string) { c.tlsCA = v })},
	{Name: "GONCCL_TEST_INJECT_PANIC", Unset: "(none)",
		Help:  "**Test only: never set it in production.** `SITE` or `SITE@N` makes the N-th pass (default the first) of one goroutine site of every communicator created afterwards panic, so tests can prove that a panic fails that operation (or its link, or the communicator) with an error naming it (`goncclInternalError`, a `DistBackendError` in Python) while the process lives on. Sites: `executor`, `collective`, `op hook`, `sendrecv sender`, `pipeline sender`, `window sender`, `direct sender`, `p2p reader`, `p2p writer`, `p2p send timer`, `p2p recv timer`, `heartbeat`, `shm setup`, `shm watcher`, `tcp link sender`, `tcp link stripe` and the bootstrap sites listed in core/safety.go",
		Parse: func(c *config, _, v string) (err error) { c.injectPanic, err = parseInjectPanic(v); return err }},
	{Name: "GONCCL_TEST_ZEROCOPY_FAULT", Unset: "(none)",
		Help: "**Test only: never set it in production.** Makes the zero-copy collectives (see `GONCCL_ZEROCOPY`) of every communicator created afterwards commit one fault, so tests can prove they catch it: `skip-peer` (leave one peer's data out of each result), `skip-done` (return without waiting for the peers to finish with this rank's buffers)",
		Parse: func(c *config, name, v string) error {
			if v != "" && v != "skip-peer" && v != "skip-done" {
				return fmt.Errorf("%w: %s=%q: want skip-peer or skip-done", ErrInvalidArgument, name, v)
			}
			c.zeroCopyFault = v
			return nil
		}},
	{Name: "GONCCL_TEST_INJECT_STALE", Default: "0",
		Help:  "**Test only: never set it in production.** `COUNT` > 0 makes a rank that joins a communicator of generation (epoch) E > 0 first send every peer a frame of epoch E-1 shaped like an all_reduce of `COUNT` float32s (a late frame of the old generation, with a payload that would spoil a sum); the peers must drop and log it (tests/test_reconfigure.py)",
		Parse: integer(0, 1<<20, func(c *config, v int64) { c.injectStale = int(v) })},
}

// The parsers Params' rows use; every error they return wraps ErrInvalidArgument.
var (
	parse    = settings.Parsers[config]{Invalid: ErrInvalidArgument}
	text     = parse.Text
	zeroOne  = parse.ZeroOne
	integer  = parse.Integer
	oneOf    = parse.OneOf
	byteSize = parse.Bytes
)

// maxQueueDepth bounds GONCCL_QUEUE_DEPTH.
const maxQueueDepth = 1 << 20

// maxTraceSize bounds GONCCL_TRACE_BUFFER_SIZE (each slot is about 100 bytes).
const maxTraceSize = 1 << 20

// config holds the parsed settings for one communicator, read when it is created (so
// that variables a host program sets just before init take effect).
type config struct {
	debug, debugSubsys string
	debugFile          string // GONCCL_DEBUG_FILE's pattern ("": stderr)
	debugHops          bool   // GONCCL_DEBUG_HOPS
	slowPath           bool   // GONCCL_FAST_PATH=0
	socketIfname       string
	portRange          tcp.PortRange // GONCCL_PORT_RANGE; zero: ports the kernel picks
	timeout            time.Duration
	chunkBytes         int
	llThreshold        int
	algo               algoAllow // GONCCL_ALGO: collective -> allowed algorithms
	gomaxprocs         int
	shmDisable         bool
	zeroCopy           bool           // GONCCL_ZEROCOPY
	zeroCopyMin        int            // GONCCL_ZEROCOPY_THRESHOLD
	zeroCopyFault      string         // GONCCL_TEST_ZEROCOPY_FAULT (tests only; "" in production)
	heartbeatTimeout   time.Duration  // GONCCL_HEARTBEAT_TIMEOUT_MS; 0: off
	linkRetry          time.Duration  // GONCCL_LINK_RETRY_MS; 0: no reconnects
	linkBuffer         int64          // GONCCL_LINK_BUFFER_MB, in bytes
	runtimeConnect     runtimeConnect // GONCCL_RUNTIME_CONNECT
	checksum           bool           // GONCCL_CHECKSUM
	traceSize          int            // GONCCL_TRACE_BUFFER_SIZE
	traceDir           string         // GONCCL_TRACE_DUMP_DIR
	sockThreads        int            // sending goroutines per TCP peer
	socksPerThread     int            // connections each drives
	queueDepth         int            // GONCCL_QUEUE_DEPTH
	tlsOn              bool           // GONCCL_TLS
	tlsCert            string         // GONCCL_TLS_CERT
	tlsKey             string         // GONCCL_TLS_KEY
	tlsCA              string         // GONCCL_TLS_CA
	tls                *tcp.TLS       // loaded when tlsOn; nil: plain TCP
	calibration        string         // GONCCL_CALIBRATION's file ("": none)
	device             DeviceSettings
	set                []string           // "NAME=value" for every variable the user set
	unknown            []settings.Unknown // GONCCL_* variables that are none of Params (see knownVariables)
	unknownIsError     bool               // GONCCL_UNKNOWN_ENV=error

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

// DeviceSettings are the settings of the paths for device buffers, parsed with every
// other setting when a communicator is created (a value out of range is refused
// there); package devroute, which routes those operations, reads them here.
type DeviceSettings struct {
	Path           string // GONCCL_DEVICE_PATH: auto, model, samegpu, 1 or 0
	P2PDisable     bool   // GONCCL_P2P_DISABLE
	Scratch        int    // GONCCL_DEVICE_SCRATCH, bytes
	RingThreshold  int    // GONCCL_DEVICE_RING_THRESHOLD, bytes; 0: never the ring
	StagedChunk    int    // GONCCL_STAGED_CHUNK, bytes; 0: no pipelining
	StagedChunkSet bool   // GONCCL_STAGED_CHUNK was set (else the path's default applies)
	StagedPinned   int    // GONCCL_STAGED_PINNED, bytes; 0: no bound
	StagedReduce   string // GONCCL_STAGED_REDUCE: gpu or cpu
	PathCost       string // GONCCL_DEVICE_PATH_COST, its form checked (route.ParseCosts reads it)
}

// DeviceSettings returns the settings of the paths for device buffers.
func (c *Comm) DeviceSettings() DeviceSettings { return c.cfg.device }

// stagedChunk parses GONCCL_STAGED_CHUNK, remembering whether it was set at all.
func stagedChunk(c *config, name, v string) error {
	c.device.StagedChunkSet = strings.TrimSpace(v) != ""
	return byteSize(0, 16<<30, func(c *config, n int64) { c.device.StagedChunk = int(n) })(c, name, strings.TrimSpace(v))
}

// loadConfig parses every parameter, in Params' order, from the environment (or its
// default), and records the ones the user set.
func loadConfig() (*config, error) {
	c := &config{}
	var err error
	if c.set, err = settings.Load(Params, c); err != nil {
		return nil, err
	}
	if c.unknown = settings.UnknownNames("GONCCL_", knownVariables(), toolPrefixes); len(c.unknown) > 0 && c.unknownIsError {
		return nil, unknownSettingsError(c.unknown)
	}
	c.sockThreads, c.socksPerThread, err = socketLayout(int64(c.sockThreads), int64(c.socksPerThread))
	if err != nil {
		return nil, err
	}
	if c.tlsOn {
		if err := checkTLSFiles(c); err != nil {
			return nil, err
		}
		if c.tls, err = tcp.LoadTLS(c.tlsCert, c.tlsKey, c.tlsCA, time.Now()); err != nil {
			return nil, fmt.Errorf("%w: GONCCL_TLS=1: %v", ErrInvalidArgument, err)
		}
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
