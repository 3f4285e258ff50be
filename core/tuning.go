package core

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// The cost model behind algorithm selection. Each algorithm's time for one operation
// is estimated from the number of messages on its critical path (each paying the
// link's latency), the bytes each rank moves (at the link's bandwidth) and the bytes
// each rank reduces (at the reduction kernels' speed). The algorithm with the lowest
// estimate among those allowed (GONCCL_ALGO) and feasible wins. Every rank evaluates
// the same model on the same inputs, so all ranks choose alike; if they did not (for
// example GONCCL_ALGO set differently per rank), the frame headers carry the algorithm
// and the ranks get a mismatch error naming it.

// linkCost is what the model knows about one kind of link.
type linkCost struct {
	name      string
	latencyUS float64 // one message, end to end, including the wake-up of the receiver
	bwGBs     float64 // sustained bytes per second of one rank's sends (1 GB = 1e9 B)
}

// Per link kind, measured on the 2-core development VM (transport/shm and transport/tcp
// benchmarks, 2 ranks; see bench/README.md). Only the ratios matter: they decide where
// latency-bound algorithms give way to bandwidth-bound ones.
var (
	shmCost = linkCost{name: "shm", latencyUS: 6, bwGBs: 4}
	tcpCost = linkCost{name: "tcp", latencyUS: 30, bwGBs: 1.8}
)

// reduceGBs is the speed of the reduction kernels (dst op= src), bytes of src per second.
const reduceGBs = 8.0

// opOverheadUS is the fixed cost of an algorithm that runs a pipeline (a goroutine and
// its hand-offs), paid once per operation.
const opOverheadUS = 3.0

// model is the cost model of one communicator: its size, the kind of its slowest link
// and the limits of its buffers.
type model struct {
	n           int
	link        linkCost
	oneHost     bool    // every peer is on this host (shared memory)
	hosts       int     // hosts the ranks span (0: unknown, links made by tests)
	maxLocal    int     // most ranks on one host
	equalHosts  bool    // every host has maxLocal ranks (see allReduceRails)
	chunkBytes  int     // pipelining unit of the ring and chain algorithms
	scratch     int     // bytes the latency algorithms may hold in scratch memory
	llThreshold int     // largest message the latency algorithms are chosen for by default
	reduceGBs   float64 // speed of the reduction kernels (reduceGBs, or a calibration's)
	cores       int     // cores this process may run on (0: unknown, taken as plenty)
	local       int     // ranks on this rank's host, this one included (0: unknown)
}

// crowd is how many ranks of this host share each core, at least 1. Where ranks
// outnumber cores, a message's latency is no longer the link's: the receiver, woken,
// waits for a core behind the others (every rank of the host takes part in every step
// of the ring, recursive doubling and halving), so each step costs about crowd times
// the link's latency, and algorithms with fewer steps win at larger sizes (256 ranks on
// 2 cores: a step costs milliseconds, not microseconds).
//
// Only on one host: across hosts (16 simulated hosts x 16 ranks on 2 cores, bench/scale
// --hosts) the crowded prices chose the hierarchical all_reduce for 8 B (0.64-0.75 s per
// operation, recursive doubling 0.35-0.36) and halving for 1 MiB (1.05-1.20 s, the
// hierarchical 0.85-0.97), so hosts keep their uncrowded prices until a model of crowded
// hosts is measured.
func (m *model) crowd() float64 {
	if m.cores <= 0 || m.local <= m.cores || !m.oneHost {
		return 1
	}
	return float64(m.local) / float64(m.cores)
}

// crowded reports whether this host's ranks outnumber its cores (whatever the hosts).
func (m *model) crowded() bool { return m.cores > 0 && m.local > m.cores }

// waitsOutlastSleeps reports whether this host's ranks outnumber its cores so far
// (8 or more to a core) that a rank's waits for its peers commonly outlast a raw sleep's
// 10 ms bound: see Comm.executorOnly.
func (m *model) waitsOutlastSleeps() bool { return m.cores > 0 && m.local >= 8*m.cores }

// latencyUS is one message's latency on the communicator's links, crowding included.
func (m *model) latencyUS() float64 { return m.link.latencyUS * m.crowd() }

// costModel describes this communicator to the model: its size and its links (shared
// memory only when every peer is on this host and reached through it).
func (c *Comm) costModel() model {
	m := model{n: c.nranks, link: shmCost, oneHost: true, chunkBytes: c.cfg.chunkBytes,
		scratch: len(c.scratch), llThreshold: c.cfg.llThreshold, reduceGBs: reduceGBs}
	if !c.peers.allShm() {
		m.link, m.oneHost = tcpCost, false
	}
	m.hosts = len(c.hosts)
	for _, h := range c.hosts {
		m.maxLocal = max(m.maxLocal, len(h))
	}
	m.equalHosts = rails(c.hosts)
	m.cores = runtime.NumCPU() // the CPUs of this process's affinity mask at start
	for _, h := range c.hosts {
		if slices.Contains(h, c.rank) {
			m.local = len(h)
		}
	}
	return m
}

// directMaxRanks bounds the direct algorithms: they link every rank to every other,
// the full mesh that connecting on demand (peers.go) avoids at scale.
const directMaxRanks = 16

// estimate is one algorithm's verdict for one message: its modelled time, or why it
// cannot run.
type estimate struct {
	algo Algo
	us   float64
	why  string // non-empty: the algorithm cannot run this message
}

// estimate is r's verdict on algorithm a for a message of bytes.
func (r *collective) estimate(m *model, a Algo, bytes int) estimate {
	for _, x := range r.algos {
		if x.algo == a {
			us, why := x.cost(m, bytes)
			return estimate{algo: a, us: us, why: why}
		}
	}
	return estimate{algo: a, why: fmt.Sprintf("no algorithm %q for %s", a, r.tuneName())}
}

func (m *model) log2n() float64 { return float64(bits.Len(uint(m.n - 1))) } // ceil(log2 n)

// xfer is the time to move b bytes over one link, latency included.
func (m *model) xfer(b float64) float64 { return m.latencyUS() + b/(m.link.bwGBs*1e3) }

// red is the time to reduce b bytes.
func (m *model) red(b float64) float64 { return b / (m.reduceGBs * 1e3) }

// pipelinedOver is m.pipelined over links of cost l in chunks of chunkBytes.
func (m *model) pipelinedOver(l linkCost, hops int, b float64, reduce bool) float64 {
	o := model{link: l, chunkBytes: m.chunkBytes, reduceGBs: m.reduceGBs}
	return o.pipelined(hops, b, reduce)
}

// pipelined is the time of a pipeline of `hops` links carrying b bytes in chunks: the
// first chunk crosses every hop, then the rest follow at the pace of the slowest stage
// (sending a chunk or reducing one: they overlap).
func (m *model) pipelined(hops int, b float64, reduce bool) float64 {
	chunks := math.Max(1, math.Ceil(b/float64(m.chunkBytes)))
	c := b / chunks
	stage, fill := m.xfer(c), m.xfer(c)
	if reduce {
		stage = math.Max(stage, m.red(c))
		fill += m.red(c)
	}
	return opOverheadUS + float64(hops)*fill + (chunks-1)*stage
}

// latencyOnly says why an algorithm that holds the whole message (what) cannot take
// bytes over limit ("" if it can).
func latencyOnly(bytes, limit int, what string) string {
	if bytes > limit {
		return fmt.Sprintf("%s takes messages of at most %d bytes (GONCCL_LL_THRESHOLD, GONCCL_CHUNKSIZE); this one has %d", what, limit, bytes)
	}
	return ""
}

// directWhy says why the direct (one-shot) algorithm what cannot run bytes ("" if it can).
func (m *model) directWhy(bytes int, what string) string {
	if !m.oneHost {
		return "the direct algorithm is for ranks on one host (shared memory)"
	}
	if why := latencyOnly(bytes, m.llThreshold, what); why != "" {
		return why
	}
	if m.n > directMaxRanks {
		return fmt.Sprintf("the direct algorithm links every pair of ranks; at most %d ranks (there are %d)", directMaxRanks, m.n)
	}
	return ""
}

// The estimates the table's rows (colltable.go) name, one per collective and
// algorithm: the time for a message of bytes (the per-rank buffer; for all_gather and
// reduce_scatter the per-rank block), or why the algorithm cannot run it.

// allReduceRingCost: reduce-scatter then all-gather, 2(n-1) steps of b/n each, (n-1)
// of them reduced, the steps' chunks pipelined.
func (m *model) allReduceRingCost(bytes int) (float64, string) {
	n := float64(m.n)
	seg := float64(bytes) / n
	return opOverheadUS + 2*(n-1)*(m.latencyUS()+seg/(m.link.bwGBs*1e3)) + (n-1)*m.red(seg), ""
}

// halvingBandwidthCost is how much slower than the ring recursive halving and doubling
// moved the same bytes where latency did not matter: its steps swap whole halves
// between partners, where the ring's chunks flow through a pipeline. Measured with
// BenchmarkAllReduceAlgos (ranks in one process over shared memory, 2 cores): 1.1x at
// 4 ranks, 1.5x at 8 and 1.7x at 16 for 1 MiB; 1.1x-1.2x for 16 MiB.
const halvingBandwidthCost = 1.5

// allReduceHalvingCost: recursive halving then doubling, 2 log2(p2) steps (p2 the
// largest power of two <= n) moving and reducing the ring's 2(p2-1)/p2 of the bytes at
// halvingBandwidthCost; beyond p2 the extra ranks fold their whole buffer in and get
// the result back. It wins where the ring's 2(n-1) steps dominate: small messages
// over many ranks, and any message over very many (256 processes on 2 cores: 1 MiB
// in ~1.3 s instead of ~8 s, bench/scale). Across hosts, where it was not measured,
// its bytes count twice the ring's, so it is chosen there only where latency clearly
// dominates.
func (m *model) allReduceHalvingCost(bytes int) (float64, string) {
	bwCost, p2 := m.halvingShape()
	b, steps, frac := float64(bytes), float64(bits.Len(uint(p2))-1), float64(p2-1)/float64(p2)
	us := opOverheadUS + 2*steps*m.latencyUS() + bwCost*(2*frac*b/(m.link.bwGBs*1e3)+frac*m.red(b))
	if p2 != m.n {
		us += 2*m.xfer(b) + m.red(b)
	}
	return us, ""
}

// allReduceChainCost: a pipelined chain reduce into rank 0, then a pipelined chain
// broadcast from it (allReduceChain): the ring's 2(n-1) hops on the way, but each rank
// sends about two messages (per chunk) where the ring's send 2(n-1), each carrying the
// whole buffer instead of 1/n of it.
func (m *model) allReduceChainCost(bytes int) (float64, string) {
	b := float64(bytes)
	return m.pipelined(m.n-1, b, true) + m.pipelined(m.n-1, b, false), ""
}

// allReduceHierCost: the hierarchical all_reduce (allReduceHier), for ranks on several
// hosts with several on a host.
func (m *model) allReduceHierCost(bytes int) (float64, string) {
	if m.hosts < 2 || m.maxLocal < 2 {
		return 0, "the hierarchical algorithm is for ranks on several hosts, several on one host at least"
	}
	b, h := float64(bytes), float64(m.hosts)
	if m.equalHosts {
		// Rails (allReduceRails): a ring reduce-scatter and all-gather inside each host
		// over shared memory, and between them all L rails at once each all-reducing
		// b/L in a ring over the network.
		l := float64(m.maxLocal)
		local := 2*(l-1)*(shmCost.latencyUS+b/l/(shmCost.bwGBs*1e3)) + (l-1)*m.red(b/l)
		seg := b / l / h
		return opOverheadUS + local + 2*(h-1)*(tcpCost.latencyUS+seg/(tcpCost.bwGBs*1e3)) + (h-1)*m.red(seg), ""
	}
	// Chain-reduce into each host's leader and chain-broadcast back over shared
	// memory; between them a ring of the leaders over the network, each byte
	// crossing it 2(H-1)/H times instead of 2(n-1)/n.
	local := m.pipelinedOver(shmCost, m.maxLocal-1, b, true) + m.pipelinedOver(shmCost, m.maxLocal-1, b, false)
	seg := b / h
	return local + opOverheadUS + 2*(h-1)*(tcpCost.latencyUS+seg/(tcpCost.bwGBs*1e3)) + (h-1)*m.red(seg), ""
}

// allReduceRDCost: recursive doubling, log2(n) exchanges of the whole buffer, each
// reduced, for messages that fit in scratch memory.
func (m *model) allReduceRDCost(bytes int) (float64, string) {
	if why := latencyOnly(bytes, m.scratch, "recursive doubling"); why != "" {
		return 0, why
	}
	b := float64(bytes)
	steps, us := m.log2n(), 0.0
	if m.n&(m.n-1) != 0 { // fold in and hand back the ranks beyond the power of two
		steps++
		us += m.xfer(b)
	}
	return us + steps*(m.xfer(b)+m.red(b)), ""
}

// allReduceDirectCost: every rank sends its buffer to every peer, then reduces all n
// in rank order.
func (m *model) allReduceDirectCost(bytes int) (float64, string) {
	if why := m.directWhy(bytes, "the direct all_reduce"); why != "" {
		return 0, why
	}
	b, n := float64(bytes), float64(m.n)
	return m.latencyUS() + (n-1)*b/(m.link.bwGBs*1e3) + (n-1)*m.red(b), ""
}

func (m *model) broadcastTreeCost(bytes int) (float64, string) {
	return m.log2n() * m.xfer(float64(bytes)), ""
}

func (m *model) broadcastChainCost(bytes int) (float64, string) {
	return m.pipelined(m.n-1, float64(bytes), false), ""
}

func (m *model) reduceTreeCost(bytes int) (float64, string) {
	b := float64(bytes)
	return m.log2n() * (m.xfer(b) + m.red(b)), ""
}

func (m *model) reduceChainCost(bytes int) (float64, string) {
	return m.pipelined(m.n-1, float64(bytes), true), ""
}

func (m *model) allGatherDirectCost(bytes int) (float64, string) {
	if why := m.directWhy(bytes, "the direct all_gather"); why != "" {
		return 0, why
	}
	return m.latencyUS() + float64(m.n-1)*float64(bytes)/(m.link.bwGBs*1e3), ""
}

func (m *model) allGatherRingCost(bytes int) (float64, string) {
	return opOverheadUS + float64(m.n-1)*m.xfer(float64(bytes)), ""
}

func (m *model) reduceScatterRingCost(bytes int) (float64, string) {
	b := float64(bytes)
	return opOverheadUS + float64(m.n-1)*(m.xfer(b)+m.red(b)), ""
}

// halvingShape is what the recursive-halving costs share: the factor on their bytes
// (whole halves swapped; twice the ring's across hosts, where it was not measured, so
// that it is chosen there only where latency clearly dominates) and p2, the largest
// power of two <= n.
func (m *model) halvingShape() (bwCost float64, p2 int) {
	bwCost = halvingBandwidthCost
	if !m.oneHost {
		bwCost = 2
	}
	p2 = 1
	for p2*2 <= m.n {
		p2 *= 2
	}
	return bwCost, p2
}

// reduceScatterHalvingCost: recursive halving, log2(p2) steps moving and reducing the
// ring's (n-1) blocks at halvingBandwidthCost (whole halves swapped, not pipelined
// chunks), plus a copy of the input into work memory; beyond p2 the extra ranks fold
// their whole input in and get their block back.
func (m *model) reduceScatterHalvingCost(bytes int) (float64, string) {
	bwCost, p2 := m.halvingShape()
	b, n := float64(bytes), float64(m.n)
	steps := float64(bits.Len(uint(p2)) - 1)
	us := opOverheadUS + steps*m.latencyUS() + bwCost*(n-1)*(b/(m.link.bwGBs*1e3)+m.red(b)) + n*b/(memcpyGBs*1e3)
	if p2 != m.n {
		us += m.xfer(n*b) + m.red(n*b) + m.xfer(b)
	}
	return us, ""
}

// perPeerCost is one message to or from each peer (gather, scatter, alltoall).
func (m *model) perPeerCost(bytes int) (float64, string) {
	return float64(m.n-1) * m.xfer(float64(bytes)), ""
}

func (m *model) barrierCost(int) (float64, string) { return m.log2n() * m.latencyUS(), "" }

// selector chooses algorithms for one communicator and logs each choice once.
type selector struct {
	m     model
	allow algoAllow // GONCCL_ALGO's restrictions (read on each choice: tests change it)
	// rows is the table of collectives. It reaches the selector here rather than by
	// name because the table's run functions call the selector, and Go forbids a
	// package variable whose initializer leads back to itself.
	rows   []collective
	logs   loggers
	mu     sync.Mutex
	logged map[choice]bool
}

// choice is one collective's choice of one algorithm.
type choice struct {
	kind Kind
	algo Algo
}

func newSelector(m model, allow algoAllow, logs loggers) *selector {
	return &selector{m: m, allow: allow, rows: collectives[:], logs: logs, logged: map[choice]bool{}}
}

// choose returns the algorithm for k on bytes: the allowed, feasible algorithm with
// the lowest estimate. The first time a collective gets a given algorithm it logs the
// choice and the estimates behind it at INFO (subsystem TUNING).
func (s *selector) choose(k Kind, bytes int) (Algo, error) {
	best, ests := s.evaluate(k, bytes)
	if best < 0 {
		var why []string
		for _, e := range ests {
			why = append(why, e.algo.String()+": "+e.why)
		}
		return AlgoNone, fmt.Errorf("%w: no algorithm allowed by GONCCL_ALGO can run %s on %d bytes (%s)",
			ErrNotSupported, s.rows[k].tuneName(), bytes, strings.Join(why, "; "))
	}
	algo := ests[best].algo
	key := choice{k, algo}
	s.mu.Lock()
	first := !s.logged[key]
	s.logged[key] = true
	s.mu.Unlock()
	if first {
		s.logs.tune.Info(fmt.Sprintf("%s of %d bytes over %d ranks (%s): %s [%s]",
			s.rows[k].tuneName(), bytes, s.m.n, s.m.link.name, algo, describeEstimates(ests, best)))
	}
	return algo, nil
}

// evaluate estimates every allowed algorithm of k (all of its row's unless GONCCL_ALGO
// restricts it) and returns the index of the best feasible one (-1 if none).
func (s *selector) evaluate(k Kind, bytes int) (int, []estimate) {
	row := &s.rows[k]
	var ests []estimate
	if allowed, restricted := s.allow[k]; restricted {
		ests = make([]estimate, len(allowed))
		for i, a := range allowed {
			ests[i] = row.estimate(&s.m, a, bytes)
		}
	} else {
		ests = make([]estimate, len(row.algos))
		for i, x := range row.algos {
			ests[i] = row.estimate(&s.m, x.algo, bytes)
		}
	}
	best := -1
	for i := range ests {
		if ests[i].why == "" && (best < 0 || ests[i].us < ests[best].us) {
			best = i
		}
	}
	return best, ests
}

func describeEstimates(ests []estimate, best int) string {
	parts := make([]string, 0, len(ests))
	for i, e := range ests {
		switch {
		case e.why != "":
			parts = append(parts, e.algo.String()+" not possible")
		case i == best:
			parts = append(parts, fmt.Sprintf("%s %.1fus chosen", e.algo, e.us))
		default:
			parts = append(parts, fmt.Sprintf("%s %.1fus", e.algo, e.us))
		}
	}
	return strings.Join(parts, ", ")
}

// table summarises, for the INIT log, which algorithm each collective with a choice
// gets at which sizes: "allreduce: direct 0-32K, ring 64K-1G".
func (s *selector) table() []string {
	var lines []string
	for _, k := range tunedKinds {
		if len(s.rows[k].algos) < 2 {
			continue
		}
		type span struct {
			algo   Algo
			lo, hi int
		}
		var spans []span
		for b := 0; b <= 1<<30; b = max(1, b*2) {
			best, ests := s.evaluate(k, b)
			a := AlgoNone
			if best >= 0 {
				a = ests[best].algo
			}
			if len(spans) > 0 && spans[len(spans)-1].algo == a {
				spans[len(spans)-1].hi = b
				continue
			}
			spans = append(spans, span{a, b, b})
		}
		parts := make([]string, len(spans))
		for i, sp := range spans {
			parts[i] = fmt.Sprintf("%s %s-%s", sp.algo, sizeName(sp.lo), sizeName(sp.hi))
		}
		lines = append(lines, s.rows[k].tuneName()+": "+strings.Join(parts, ", "))
	}
	return lines
}

func sizeName(b int) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return fmt.Sprint(b)
}
