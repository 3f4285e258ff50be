package route

import (
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"

	"github.com/gonccl/gonccl/core"
)

// The cost model of the paths an operation on device buffers can take, by which
// GONCCL_DEVICE_PATH=auto chooses one per operation kind and size (internal/devroute/devauto.go). It
// lives here, beside the setup of the paths, because the paths are the C ABI's: core's
// model (core/tuning.go) prices host algorithms over links and knows nothing of GPUs,
// and package cuda runs one path each without choosing between them.
//
// Each path's time for an operation of bytes (the size core.Comm.Estimate takes: the
// per-rank buffer, or block for all_gather, reduce_scatter, gather, scatter, alltoall)
// is a latency plus the operation's bus bytes (nccl-tests' busbw convention, so that one
// measured all_reduce busbw prices every collective) at the path's bus bandwidth:
//
//	staged:   latency + busBytes / busbw
//	same-GPU: latency + busBytes / busbw (its four collectives only)
//	device:   latency + (rounds-1) * round + busBytes / busbw, rounds = ceil(scratch bytes / scratch)
//	          where ranks share a GPU without MPS (time-sliced): the sliced latency and
//	          round instead, plus hold per round and peer (the slice each waiting stream
//	          keeps from the other ranks' compute)
//
// The figures (CostParams) are measured where a GPU has run the path and estimated
// from the design where none has; GONCCL_DEVICE_PATH_COST overrides any of them. The
// model only has to rank the paths: every rank evaluates it on the same inputs (the
// settings, which the setup exchange checks are the same everywhere, the topology the
// exchange agreed, the kind and the size), so every rank chooses alike.

// Path is a path an operation on device buffers can take.
type Path uint8

const (
	Staged  Path = iota // through pinned host memory and core's host algorithm
	Device              // cuda.Shared: IPC-mapped scratch, GPU-side flag waits
	SameGPU             // samegpu.SameGPU: ranks on one GPU, one launch, the streams ordering each other
	NumPaths
)

func (p Path) String() string {
	switch p {
	case Staged:
		return "staged"
	case Device:
		return "device"
	case SameGPU:
		return "same-GPU"
	}
	return fmt.Sprintf("path(%d)", uint8(p))
}

// Costs are the model's figures: latencies and rounds in microseconds, bandwidths
// in GB/s (1e9 B/s) of nccl-tests' bus bandwidth.
type Costs struct {
	stagedLatency, stagedBusbw              float64
	deviceLatency, deviceBusbw, deviceRound float64
	slicedLatency, slicedRound, slicedHold  float64
	sameGPULatency, sameGPUBusbw            float64
}

// CostParam is one figure: its key in GONCCL_DEVICE_PATH_COST, its unit, its default
// and where the default comes from (docs/gpu.md prints the same table).
type CostParam struct {
	key, unit string
	def       float64
	source    string
	field     func(*Costs) *float64
}

// CostParams are the figures with their defaults. "measured": one NVIDIA H100 80GB
// HBM3, 2 ranks sharing it without MPS, fp32 all_reduce, 2026-11-26
// (bench/results/h100-2026-11-26/); "estimate": from the design, never run on a GPU
// (2026-11-28), to be replaced by measurements.
var CostParams = []CostParam{
	{"staged.latency", "us", 899, "measured: 16 B all_reduce, queued (before the staged path was pipelined)",
		func(c *Costs) *float64 { return &c.stagedLatency }},
	{"staged.busbw", "GB/s", 2.93, "measured: 256 MiB all_reduce (before pipelining, so low)",
		func(c *Costs) *float64 { return &c.stagedBusbw }},
	{"device.latency", "us", 20, "estimate: a few copies, kernels and flag waits per operation, no time-slicing (GPUs of their own, or MPS)",
		func(c *Costs) *float64 { return &c.deviceLatency }},
	{"device.busbw", "GB/s", 250, "estimate: the scratch rounds move about 11 bytes of memory per byte of a 2-rank all_reduce, against 4 for one pass",
		func(c *Costs) *float64 { return &c.deviceBusbw }},
	{"device.round", "us", 10, "estimate: each round of scratch past the first (two flag waits), no time-slicing",
		func(c *Costs) *float64 { return &c.deviceRound }},
	{"device.sliced_latency", "us", 496, "measured: 16 B all_reduce, queued, 2 ranks time-slicing one GPU",
		func(c *Costs) *float64 { return &c.slicedLatency }},
	{"device.sliced_round", "us", 600, "measured: each 8 MiB round past the first (16 MiB: 1,038 us, 256 MiB: 21,114 us)",
		func(c *Costs) *float64 { return &c.slicedRound }},
	{"device.sliced_hold", "us", 4000, "derived: DDP step 164.2 ms on the device path against 55.6 ms staged, over its 24 rounds (the GPU a stream waiting for a peer keeps from the other ranks' compute), per round and peer",
		func(c *Costs) *float64 { return &c.slicedHold }},
	{"samegpu.latency", "us", 25, "estimate: a launch, the hosts meeting once and one stream wait per rank already met (15-30 us; a wait not yet met may cost a time slice without MPS)",
		func(c *Costs) *float64 { return &c.sameGPULatency }},
	{"samegpu.busbw", "GB/s", 600, "estimate: one pass, 2N bytes of memory per byte at the H100's ~2.9 TB/s, less kernel efficiency",
		func(c *Costs) *float64 { return &c.sameGPUBusbw }},
}

// DefaultCosts returns the built-in figures.
func DefaultCosts() Costs {
	var c Costs
	for _, p := range CostParams {
		*p.field(&c) = p.def
	}
	return c
}

// ParseCosts reads GONCCL_DEVICE_PATH_COST's value (core.DeviceSettings.PathCost: a
// comma-separated list of key=value, keys of CostParams): the built-in figures with
// the ones it names replaced.
func ParseCosts(v string) (Costs, error) {
	c := DefaultCosts()
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		key = strings.ToLower(strings.TrimSpace(key))
		var p *CostParam
		for i := range CostParams {
			if CostParams[i].key == key {
				p = &CostParams[i]
			}
		}
		if !ok || p == nil {
			return c, fmt.Errorf("%w: GONCCL_DEVICE_PATH_COST: %q is not key=value with a key of %s", ErrUsage, item, costKeys())
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || (p.unit == "GB/s" && f == 0) {
			return c, fmt.Errorf("%w: GONCCL_DEVICE_PATH_COST: %s=%q: want a number of %s, at least 0 (above 0 for a bandwidth)", ErrUsage, key, val, p.unit)
		}
		*p.field(&c) = f
	}
	return c, nil
}

func costKeys() string {
	keys := make([]string, len(CostParams))
	for i, p := range CostParams {
		keys[i] = p.key
	}
	return strings.Join(keys, ", ")
}

// Hash names the figures, for the setup exchange to check every rank has the same.
func (c Costs) Hash() uint64 {
	h := fnv.New64a()
	for _, p := range CostParams {
		fmt.Fprintf(h, "%s=%v;", p.key, *p.field(&c))
	}
	return h.Sum64()
}

// Topo is what the setup exchange agreed about the ranks' GPUs.
type Topo struct {
	nranks  int
	oneGPU  bool // every rank on one GPU
	shared  bool // two ranks on one GPU at least
	mps     bool // every rank on a shared GPU is a client of an MPS server there
	scratch int  // the device path's scratch per rank, in bytes
}

// sliced reports whether the device path's GPU-side waits cross contexts that take
// turns on a GPU.
func (t Topo) sliced() bool { return t.shared && !t.mps }

// sameGPUKinds are the collectives the same-GPU path runs.
var sameGPUKinds = map[core.Kind]bool{core.KindAllReduce: true, core.KindAllGather: true,
	core.KindReduceScatter: true, core.KindBroadcast: true}

// busBytes is an operation's bytes as nccl-tests' busbw counts them, for bytes as
// core.Comm.Estimate takes them, over n ranks.
func busBytes(k core.Kind, n, bytes int) float64 {
	b, nf := float64(bytes), float64(n)
	switch k {
	case core.KindAllReduce:
		return b * 2 * (nf - 1) / nf
	case core.KindAllGather, core.KindReduceScatter, core.KindGather, core.KindScatter, core.KindAlltoAll:
		return b * (nf - 1)
	case core.KindBroadcast, core.KindReduce:
		return b
	}
	return 0 // barrier; alltoallv, whose sizes differ per rank, is priced by its latency
}

// scratchBytes is how many bytes of each rank's scratch an operation fills over its
// rounds on the device path (cuda/devcoll.go).
func scratchBytes(k core.Kind, n, bytes int) int {
	switch k {
	case core.KindReduceScatter, core.KindAlltoAll, core.KindScatter:
		return bytes * n
	case core.KindBarrier, core.KindAlltoAllv:
		return 0
	}
	return bytes
}

// cost is path p's modelled time in microseconds for an operation of kind k on bytes,
// and whether p runs k at all.
func (c *Costs) cost(t Topo, p Path, k core.Kind, bytes int) (float64, bool) {
	bus := busBytes(k, t.nranks, bytes)
	switch p {
	case Staged:
		return c.stagedLatency + bus/(c.stagedBusbw*1e3), true
	case SameGPU:
		if !sameGPUKinds[k] {
			return 0, false
		}
		if k == core.KindAllReduce && t.nranks > 8 {
			// Composed from two-operand kernels: (5N-3)S bytes of memory against 2NS.
			bus *= float64(5*t.nranks-3) / float64(2*t.nranks)
		}
		return c.sameGPULatency + bus/(c.sameGPUBusbw*1e3), true
	case Device:
		rounds := 1.0
		if t.scratch > 0 {
			rounds = math.Max(1, math.Ceil(float64(scratchBytes(k, t.nranks, bytes))/float64(t.scratch)))
		}
		us := bus / (c.deviceBusbw * 1e3)
		if t.sliced() {
			// Each round every rank's stream waits for each peer's flag: n-1 waits that
			// hold the GPU (the measured hold is 2 ranks', one wait a round).
			return us + c.slicedLatency + (rounds-1)*c.slicedRound + rounds*float64(t.nranks-1)*c.slicedHold, true
		}
		return us + c.deviceLatency + (rounds-1)*c.deviceRound, true
	}
	return 0, false
}

// Chooser chooses the path of each operation among those set up.
type Chooser struct {
	costs Costs
	topo  Topo
	avail [NumPaths]bool // Staged always
}

// Choose returns the available path with the lowest modelled time for kind k on
// bytes (ties go to the lower path: staged, then device), and every path's time (NaN
// where it cannot run the operation or is not set up).
func (pc *Chooser) Choose(k core.Kind, bytes int) (Path, [NumPaths]float64) {
	var us [NumPaths]float64
	best := Staged
	for p := range NumPaths {
		us[p] = math.NaN()
		if !pc.avail[p] {
			continue
		}
		t, ok := pc.costs.cost(pc.topo, p, k, bytes)
		if !ok {
			continue
		}
		us[p] = t
		if math.IsNaN(us[best]) || t < us[best] {
			best = p
		}
	}
	return best, us
}

// Pick is Choose's path alone.
func (pc *Chooser) Pick(k core.Kind, bytes int) Path {
	p, _ := pc.Choose(k, bytes)
	return p
}

// ChosenKinds are the operations whose path the chooser decides, in the INIT log's
// order. Point-to-point takes the device path whenever it is set up.
var ChosenKinds = []core.Kind{core.KindAllReduce, core.KindAllGather, core.KindReduceScatter, core.KindBroadcast,
	core.KindReduce, core.KindGather, core.KindScatter, core.KindAlltoAll, core.KindBarrier, core.KindAlltoAllv}

// maxModelBytes bounds the sizes the spans cover.
const maxModelBytes = 16 << 30

// span is a range of sizes [lo, hi] that take one path.
type span struct {
	path   Path
	lo, hi int
}

// spans returns the paths kind k takes from 0 bytes to maxModelBytes: the choice at
// 0 and every power of two, each change located to the byte by bisection.
func (pc *Chooser) spans(k core.Kind) []span {
	out := []span{{pc.Pick(k, 0), 0, 0}}
	prev := 0
	for b := 1; b <= maxModelBytes; b *= 2 {
		p := pc.Pick(k, b)
		last := &out[len(out)-1]
		if p == last.path {
			last.hi, prev = b, b
			continue
		}
		lo, hi := prev, b // lo takes last.path, hi takes p
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if pc.Pick(k, mid) == last.path {
				lo = mid
			} else {
				hi = mid
			}
		}
		last.hi = lo
		out = append(out, span{p, hi, b})
		prev = b
	}
	return out
}

// Uses reports whether path p is chosen for some operation and size.
func (pc *Chooser) Uses(p Path) bool {
	for _, k := range ChosenKinds {
		for _, s := range pc.spans(k) {
			if s.path == p {
				return true
			}
		}
	}
	return false
}

// Describe is the INIT log's account of the choice: one line per group of operations
// that choose alike, each span with the model's times at a size in it, e.g.
// "all_reduce, all_gather: <= 2 MiB device (model at 16 B: device 20 us, same-GPU 25 us, staged 899 us), > 2 MiB same-GPU (at 256 MiB: ...)".
func (pc *Chooser) Describe() []string {
	type group struct {
		kinds []string
		first core.Kind
		spans []span
	}
	var groups []*group
	for _, k := range ChosenKinds {
		ss := pc.spans(k)
		found := false
		for _, g := range groups {
			if equalSpans(g.spans, ss) {
				g.kinds = append(g.kinds, k.String())
				found = true
				break
			}
		}
		if !found {
			groups = append(groups, &group{kinds: []string{k.String()}, first: k, spans: ss})
		}
	}
	lines := make([]string, 0, len(groups))
	for _, g := range groups {
		parts := make([]string, len(g.spans))
		for i, s := range g.spans {
			var at int // the size whose times the log shows
			switch {
			case len(g.spans) == 1:
				at = 16
			case i == 0:
				at = min(16, s.hi)
			case i == len(g.spans)-1:
				at = max(s.lo, 256<<20)
			default:
				at = int(math.Sqrt(float64(max(s.lo, 1)) * float64(s.hi)))
			}
			var where string
			switch {
			case len(g.spans) == 1:
				where = "at every size"
			case i == 0:
				where = "<= " + sizeText(s.hi)
			case i == len(g.spans)-1:
				where = "> " + sizeText(s.lo-1)
			default:
				where = fmt.Sprintf("%s-%s", sizeText(s.lo), sizeText(s.hi))
			}
			parts[i] = fmt.Sprintf("%s %s (model at %s: %s)", where, s.path, sizeText(at), pc.times(g.first, at, s.path))
		}
		lines = append(lines, strings.Join(g.kinds, ", ")+": "+strings.Join(parts, ", "))
	}
	return lines
}

// times lists every available path's time for k on bytes, the chosen one first.
func (pc *Chooser) times(k core.Kind, bytes int, chosen Path) string {
	_, us := pc.Choose(k, bytes)
	order := []Path{chosen}
	for p := range NumPaths {
		if p != chosen {
			order = append(order, p)
		}
	}
	var parts []string
	for i, p := range order {
		if math.IsNaN(us[p]) {
			continue
		}
		t := timeText(us[p])
		if i > 0 {
			t = p.String() + " " + t
		}
		parts = append(parts, t)
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return parts[0] + " vs " + strings.Join(parts[1:], ", ")
}

func equalSpans(a, b []span) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// sizeText is bytes for a log: "16 B", "64 KiB", "2.1 MiB".
func sizeText(b int) string {
	units := []string{"B", "KiB", "MiB", "GiB"}
	f, u := float64(b), 0
	for f >= 1024 && u < len(units)-1 {
		f, u = f/1024, u+1
	}
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f %s", f, units[u])
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}

// timeText is microseconds for a log: "25 us", "3.8 ms", "1.2 s".
func timeText(us float64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%.0f us", us)
	case us < 1e6:
		return fmt.Sprintf("%.1f ms", us/1e3)
	}
	return fmt.Sprintf("%.2f s", us/1e6)
}

// DeviceRing reports whether the device path runs an all_reduce of bytes per rank (a
// reduce_scatter of bytes of input per rank) by its ring rather than the one-shot:
// among three or more ranks, from the threshold from (GONCCL_DEVICE_RING_THRESHOLD;
// 0: never). Below it, every rank reading every peer's scratch at once costs fewer
// flag round trips than the ring's 2(N-1) steps; above, the ring sends each byte over
// one neighbour's link instead of every pair's. Every rank decides alike: the same
// size, rank count and setting.
func DeviceRing(ranks, bytes, from int) bool {
	return ranks >= 3 && from > 0 && bytes >= from
}
