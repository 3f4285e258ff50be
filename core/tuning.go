package core

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
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
	oneHost     bool // every peer is on this host (shared memory)
	hosts       int  // hosts the ranks span (0: unknown, links made by tests)
	maxLocal    int  // most ranks on one host
	equalHosts  bool // every host has maxLocal ranks (see allReduceRails)
	chunkBytes  int  // pipelining unit of the ring and chain algorithms
	scratch     int  // bytes the latency algorithms may hold in scratch memory
	llThreshold int  // largest message the latency algorithms are chosen for by default
}

// costModel describes this communicator to the model: its size and its links (shared
// memory only when every peer is on this host and reached through it).
func (c *Comm) costModel() model {
	m := model{n: c.nranks, link: shmCost, oneHost: true, chunkBytes: c.cfg.chunkBytes,
		scratch: len(c.scratch), llThreshold: c.cfg.llThreshold}
	if !c.peers.allShm() {
		m.link, m.oneHost = tcpCost, false
	}
	m.hosts = len(c.hosts)
	for _, h := range c.hosts {
		m.maxLocal = max(m.maxLocal, len(h))
	}
	m.equalHosts = rails(c.hosts)
	return m
}

// directMaxRanks bounds the direct algorithms: they link every rank to every other,
// the full mesh that connecting on demand (peers.go) avoids at scale.
const directMaxRanks = 16

// estimate is one algorithm's verdict for one message: its modelled time, or why it
// cannot run.
type estimate struct {
	algo string
	us   float64
	why  string // non-empty: the algorithm cannot run this message
}

// algorithms lists every collective's algorithms by their GONCCL_ALGO names, in the order
// the model prefers them when estimates tie.
var algorithms = map[string][]string{
	"allreduce":     {"rd", "direct", "ring", "hier"},
	"broadcast":     {"tree", "chain"},
	"reduce":        {"tree", "chain"},
	"allgather":     {"direct", "ring"},
	"reducescatter": {"ring"},
	"gather":        {"direct"},
	"scatter":       {"direct"},
	"alltoall":      {"pairwise"},
	"barrier":       {"dissemination"},
}

// collectiveNames is the order collectives appear in logs and help texts.
var collectiveNames = []string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier"}

func (m *model) log2n() float64 { return float64(bits.Len(uint(m.n - 1))) } // ceil(log2 n)

// xfer is the time to move b bytes over one link, latency included.
func (m *model) xfer(b float64) float64 { return m.link.latencyUS + b/(m.link.bwGBs*1e3) }

// red is the time to reduce b bytes.
func red(b float64) float64 { return b / (reduceGBs * 1e3) }

// pipelinedOver is pipelined over links of cost l in chunks of chunkBytes.
func pipelinedOver(l linkCost, chunkBytes, hops int, b float64, reduce bool) float64 {
	m := model{link: l, chunkBytes: chunkBytes}
	return m.pipelined(hops, b, reduce)
}

// pipelined is the time of a pipeline of `hops` links carrying b bytes in chunks: the
// first chunk crosses every hop, then the rest follow at the pace of the slowest stage
// (sending a chunk or reducing one: they overlap).
func (m *model) pipelined(hops int, b float64, reduce bool) float64 {
	chunks := math.Max(1, math.Ceil(b/float64(m.chunkBytes)))
	c := b / chunks
	stage, fill := m.xfer(c), m.xfer(c)
	if reduce {
		stage = math.Max(stage, red(c))
		fill += red(c)
	}
	return opOverheadUS + float64(hops)*fill + (chunks-1)*stage
}

// estimate models algo for coll on a message of bytes (the per-rank buffer; for
// all_gather and reduce_scatter the per-rank block). It is long because it is the
// whole cost model: one case per collective and algorithm, each a formula with the
// comment that derives it, which read best side by side.
func (m *model) estimate(coll, algo string, bytes int) estimate {
	b := float64(bytes)
	n := float64(m.n)
	e := estimate{algo: algo}
	latencyOnly := func(limit int, what string) bool {
		if bytes > limit {
			e.why = fmt.Sprintf("%s takes messages of at most %d bytes (GONCCL_LL_THRESHOLD, GONCCL_CHUNKSIZE); this one has %d", what, limit, bytes)
			return false
		}
		return true
	}
	switch coll + ":" + algo {
	case "allreduce:ring":
		// Reduce-scatter then all-gather: 2(n-1) steps of b/n each, (n-1) of them reduced,
		// the steps' chunks pipelined.
		seg := b / n
		e.us = opOverheadUS + 2*(n-1)*(m.link.latencyUS+seg/(m.link.bwGBs*1e3)) + (n-1)*red(seg)
	case "allreduce:hier":
		if m.hosts < 2 || m.maxLocal < 2 {
			e.why = "the hierarchical algorithm is for ranks on several hosts, several on one host at least"
			break
		}
		h := float64(m.hosts)
		if m.equalHosts {
			// Rails (allReduceRails): a ring reduce-scatter and all-gather inside each host
			// over shared memory, and between them all L rails at once each all-reducing
			// b/L in a ring over the network.
			l := float64(m.maxLocal)
			local := 2*(l-1)*(shmCost.latencyUS+b/l/(shmCost.bwGBs*1e3)) + (l-1)*red(b/l)
			seg := b / l / h
			e.us = opOverheadUS + local + 2*(h-1)*(tcpCost.latencyUS+seg/(tcpCost.bwGBs*1e3)) + (h-1)*red(seg)
			break
		}
		// Chain-reduce into each host's leader and chain-broadcast back over shared
		// memory; between them a ring of the leaders over the network, each byte
		// crossing it 2(H-1)/H times instead of 2(n-1)/n.
		local := pipelinedOver(shmCost, m.chunkBytes, m.maxLocal-1, b, true) + pipelinedOver(shmCost, m.chunkBytes, m.maxLocal-1, b, false)
		seg := b / h
		e.us = local + opOverheadUS + 2*(h-1)*(tcpCost.latencyUS+seg/(tcpCost.bwGBs*1e3)) + (h-1)*red(seg)
	case "allreduce:rd":
		if !latencyOnly(m.scratch, "recursive doubling") {
			break
		}
		steps := m.log2n()
		if m.n&(m.n-1) != 0 { // fold in and hand back the ranks beyond the power of two
			steps++
			e.us += m.xfer(b)
		}
		e.us += steps * (m.xfer(b) + red(b))
	case "allreduce:direct":
		if !m.oneHost {
			e.why = "the direct algorithm is for ranks on one host (shared memory)"
			break
		}
		if !latencyOnly(m.llThreshold, "the direct all_reduce") {
			break
		}
		if m.n > directMaxRanks {
			e.why = fmt.Sprintf("the direct algorithm links every pair of ranks; at most %d ranks (there are %d)", directMaxRanks, m.n)
			break
		}
		// Every rank sends its buffer to every peer, then reduces all n in rank order.
		e.us = m.link.latencyUS + (n-1)*b/(m.link.bwGBs*1e3) + (n-1)*red(b)
	case "broadcast:tree":
		e.us = m.log2n() * m.xfer(b)
	case "broadcast:chain":
		e.us = m.pipelined(m.n-1, b, false)
	case "reduce:tree":
		e.us = m.log2n() * (m.xfer(b) + red(b))
	case "reduce:chain":
		e.us = m.pipelined(m.n-1, b, true)
	case "allgather:direct":
		if !m.oneHost {
			e.why = "the direct algorithm is for ranks on one host (shared memory)"
			break
		}
		if !latencyOnly(m.llThreshold, "the direct all_gather") {
			break
		}
		if m.n > directMaxRanks {
			e.why = fmt.Sprintf("the direct algorithm links every pair of ranks; at most %d ranks (there are %d)", directMaxRanks, m.n)
			break
		}
		e.us = m.link.latencyUS + (n-1)*b/(m.link.bwGBs*1e3)
	case "allgather:ring":
		e.us = opOverheadUS + (n-1)*m.xfer(b)
	case "reducescatter:ring":
		e.us = opOverheadUS + (n-1)*(m.xfer(b)+red(b))
	case "gather:direct", "scatter:direct", "alltoall:pairwise":
		e.us = (n - 1) * m.xfer(b)
	case "barrier:dissemination":
		e.us = m.log2n() * m.link.latencyUS
	default:
		e.why = fmt.Sprintf("no algorithm %q for %s", algo, coll)
	}
	return e
}

// selector chooses algorithms for one communicator and logs each choice once.
type selector struct {
	m      model
	allow  map[string][]string // GONCCL_ALGO: collective -> allowed algorithms
	logs   loggers
	mu     sync.Mutex
	logged map[string]bool
}

func newSelector(m model, allow map[string][]string, logs loggers) *selector {
	return &selector{m: m, allow: allow, logs: logs, logged: map[string]bool{}}
}

// choose returns the algorithm for coll on bytes: the allowed, feasible algorithm with
// the lowest estimate. The first time a collective gets a given algorithm it logs the
// choice and the estimates behind it at INFO (subsystem TUNING).
func (s *selector) choose(coll string, bytes int) (string, error) {
	best, ests := s.evaluate(coll, bytes)
	if best < 0 {
		var why []string
		for _, e := range ests {
			why = append(why, e.algo+": "+e.why)
		}
		return "", fmt.Errorf("%w: no algorithm allowed by GONCCL_ALGO can run %s on %d bytes (%s)",
			ErrNotSupported, coll, bytes, strings.Join(why, "; "))
	}
	algo := ests[best].algo
	key := coll + ":" + algo
	s.mu.Lock()
	first := !s.logged[key]
	s.logged[key] = true
	s.mu.Unlock()
	if first {
		s.logs.tune.Info(fmt.Sprintf("%s of %d bytes over %d ranks (%s): %s [%s]",
			coll, bytes, s.m.n, s.m.link.name, algo, describeEstimates(ests, best)))
	}
	return algo, nil
}

// evaluate estimates every allowed algorithm and returns the index of the best feasible
// one (-1 if none).
func (s *selector) evaluate(coll string, bytes int) (int, []estimate) {
	names := algorithms[coll]
	if allowed, ok := s.allow[coll]; ok {
		names = allowed
	}
	ests := make([]estimate, len(names))
	best := -1
	for i, a := range names {
		ests[i] = s.m.estimate(coll, a, bytes)
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
			parts = append(parts, e.algo+" not possible")
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
	for _, coll := range collectiveNames {
		if len(algorithms[coll]) < 2 {
			continue
		}
		type span struct {
			algo   string
			lo, hi int
		}
		var spans []span
		for b := 0; b <= 1<<30; b = max(1, b*2) {
			best, ests := s.evaluate(coll, b)
			a := "none"
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
		lines = append(lines, coll+": "+strings.Join(parts, ", "))
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

// algoHelp lists every collective:algorithm pair GONCCL_ALGO accepts.
func algoHelp() string {
	var parts []string
	for _, coll := range collectiveNames {
		parts = append(parts, coll+":"+strings.Join(algorithms[coll], "|"))
	}
	return strings.Join(parts, ", ")
}

// parseAlgo parses GONCCL_ALGO in NCCL's syntax: entries separated by ';' (or ','),
// each "collective:algo[,algo...]" allowing those algorithms for that collective,
// "^algo" excluding one, and bare "algo[,algo...]" applying to every collective that
// has it. For example "allreduce:ring", "allreduce:ring,rd;broadcast:chain",
// "^direct", "allreduce:ring,broadcast:chain". It returns the allowed algorithms per
// collective that the setting restricts. Its length is the grammar's, with an error
// for each way an entry can be wrong, naming the entry.
func parseAlgo(s string) (map[string][]string, error) {
	allow := map[string][]string{}
	if strings.TrimSpace(s) == "" {
		return allow, nil
	}
	bad := func(item, why string) error {
		return fmt.Errorf("%w: GONCCL_ALGO=%q: %s (%s); expected e.g. allreduce:ring or allreduce:ring,rd;broadcast:chain, from %s",
			ErrInvalidArgument, s, item, why, algoHelp())
	}
	// Group tokens into entries: a token "coll:algo" starts an entry, bare tokens join
	// the current one (or a global entry when none has started).
	type entry struct {
		coll    string // "" for every collective
		exclude bool
		algos   []string
	}
	var entries []*entry
	var cur *entry
	for _, part := range strings.Split(strings.ToLower(s), ";") {
		cur = nil
		for _, tok := range strings.Split(part, ",") {
			tok = strings.TrimSpace(tok)
			if tok == "" {
				continue
			}
			if coll, algo, ok := strings.Cut(tok, ":"); ok {
				if _, known := algorithms[coll]; !known {
					return nil, bad(tok, "unknown collective "+coll)
				}
				cur = &entry{coll: coll}
				entries = append(entries, cur)
				tok = algo
			} else if cur == nil {
				cur = &entry{}
				entries = append(entries, cur)
			}
			if strings.HasPrefix(tok, "^") {
				if len(cur.algos) > 0 {
					return nil, bad(tok, "^ must come first in an entry")
				}
				cur.exclude = true
				tok = tok[1:]
			}
			cur.algos = append(cur.algos, tok)
		}
	}
	for _, e := range entries {
		colls := collectiveNames
		if e.coll != "" {
			colls = []string{e.coll}
		}
		matched := false
		for _, coll := range colls {
			var keep []string
			for _, a := range algorithms[coll] {
				if contains(e.algos, a) != e.exclude {
					keep = append(keep, a)
				}
			}
			for _, a := range e.algos {
				if contains(algorithms[coll], a) {
					matched = true
				} else if e.coll != "" {
					return nil, bad(e.coll+":"+a, fmt.Sprintf("%s has no algorithm %q", coll, a))
				}
			}
			// A bare entry restricts only the collectives it names an algorithm of, and
			// never takes a collective's last algorithm away.
			if e.coll == "" && (len(keep) == 0 || len(keep) == len(algorithms[coll])) {
				continue
			}
			if len(keep) == 0 {
				return nil, bad(e.coll, "that excludes every algorithm of "+coll)
			}
			allow[coll] = keep
		}
		if !matched {
			return nil, bad(strings.Join(e.algos, ","), "no collective has that algorithm")
		}
	}
	return allow, nil
}

func describeAllow(allow map[string][]string) string {
	keys := make([]string, 0, len(allow))
	for k := range allow {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ":" + strings.Join(allow[k], ",")
	}
	return strings.Join(parts, ";")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
