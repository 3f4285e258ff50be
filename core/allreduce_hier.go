package core

import "slices"

// allReduceHier reduces buf across ranks spread over several hosts in three levels.
// Where every host has the same number of ranks it runs allReduceRails; otherwise
// the ranks of each host reduce into their host's leader (its lowest rank) along a
// chain over shared memory, the leaders all-reduce over the network in a ring, and
// each leader broadcasts the result down its host's chain.
//
//	host A: a2 -> a1 -> a0 ─┐                 ┌─ a0 -> a1 -> a2
//	                        ├─ ring(a0, b0) ──┤
//	host B:       b1 -> b0 ─┘                 └─ b0 -> b1
//
// Each byte crosses the network 2(H-1)/H times per leader (H hosts) instead of
// 2(n-1)/n times per rank for a flat ring, and within a host it moves over shared
// memory. hosts lists the ranks of each host, every list in increasing order. work
// holds the chain's staged partials (reduceWindow chunks).
func (e *exec) allReduceHier(buf []byte, count int, dt DataType, op RedOp, hosts [][]int, work []byte) error {
	if rails(hosts) {
		return e.allReduceRails(buf, count, dt, op, hosts)
	}
	var local, leaders []int
	for _, h := range hosts {
		leaders = append(leaders, h[0])
		if slices.Contains(h, e.rank) {
			local = h
		}
	}
	phaseOp := op
	if op == Avg {
		phaseOp = Sum // divided once, by the leaders, after the ring
	}
	if len(local) > 1 {
		if err := e.sub(local).reduceChain(buf, buf, count, dt, phaseOp, 0, work); err != nil {
			return err
		}
	}
	if e.rank == local[0] {
		if len(leaders) > 1 {
			if err := e.sub(leaders).allReduceRing(buf, count, dt, phaseOp); err != nil {
				return err
			}
		}
		if op == Avg {
			if err := DivideBy(buf, dt, e.nranks); err != nil {
				return err
			}
		}
	}
	if len(local) > 1 {
		return e.sub(local).broadcastChain(buf, 0)
	}
	return nil
}

// sub returns an exec over the ranks of group (in e's numbering, increasing): its
// rank and nranks are e's position in group and len(group), and peer i of it is rank
// group[i] of e. It shares e's links, header, deadline and buffers; it is used for
// one phase at a time.
func (e *exec) sub(group []int) *exec {
	g := group
	if e.group != nil {
		g = make([]int, len(group))
		for i, r := range group {
			g[i] = e.group[r]
		}
	}
	return &exec{
		rank: slices.Index(group, e.rank), nranks: len(group), peers: e.peers, group: g,
		hdr: e.hdr, deadline: e.deadline, timeout: e.timeout, scratch: e.scratch, chunkBytes: e.chunkBytes, inlineMax: e.inlineMax,
		breakLinks: e.breakLinks, guard: e.guard, sendHdrs: e.sendHdrs, recvHdrs: e.recvHdrs, sinks: e.sinks,
	}
}

// hostGroups returns the ranks of each host (as the ranks announced at init), hosts
// ordered by their lowest rank; nil if the communicator was made from links (tests).
func hostGroups(ranks []rankInfo) [][]int {
	if ranks == nil {
		return nil
	}
	var hosts [][]int
	index := map[string]int{}
	for r, ri := range ranks {
		i, ok := index[ri.Host]
		if !ok {
			i = len(hosts)
			index[ri.Host] = i
			hosts = append(hosts, nil)
		}
		hosts[i] = append(hosts[i], r)
	}
	return hosts
}

// rails says whether hosts all hold the same number (at least 2) of ranks.
func rails(hosts [][]int) bool {
	for _, h := range hosts {
		if len(h) != len(hosts[0]) {
			return false
		}
	}
	return len(hosts) > 1 && len(hosts[0]) > 1
}

// allReduceRails is the hierarchical all_reduce for hosts of L ranks each: a ring
// reduce-scatter inside each host (over shared memory) leaves local rank i with its
// host's sum of segment i+1 of L; the i-th ranks of all hosts (a rail) all-reduce that
// segment in a ring over the network, all rails at once; a ring all-gather inside each
// host hands every rank the whole result.
//
//	host A: [a0 a1] reduce-scatter ─► a0: seg 1, a1: seg 0 ─► rail rings (a0,b0), (a1,b1) ─► all-gather
//	host B: [b0 b1] reduce-scatter ─► b0: seg 1, b1: seg 0 ─┘
//
// Every rank moves 2(H-1)/H of b/L over the network (H hosts), all ranks in
// parallel, where a flat ring moves 2(n-1)/n of b/n per rank but through every hop
// of the ring, the slowest (a network one) setting the pace.
func (e *exec) allReduceRails(buf []byte, count int, dt DataType, op RedOp, hosts [][]int) error {
	L, es := len(hosts[0]), dt.Size()
	var local, rail []int
	li := -1
	for _, h := range hosts {
		if i := slices.Index(h, e.rank); i >= 0 {
			local, li = h, i
		}
	}
	for _, h := range hosts {
		rail = append(rail, h[li])
	}
	phaseOp := op
	if op == Avg {
		phaseOp = Sum
	}
	host := e.sub(local)
	if err := host.ringSteps(buf, count, dt, phaseOp, 0, L-1); err != nil {
		return err
	}
	lo, hi := split(count, L, mod(li+1, L))
	seg := buf[lo*es : hi*es]
	if err := e.sub(rail).allReduceRing(seg, hi-lo, dt, phaseOp); err != nil {
		return err
	}
	if op == Avg {
		if err := DivideBy(seg, dt, e.nranks); err != nil {
			return err
		}
	}
	return host.ringSteps(buf, count, dt, phaseOp, L-1, 2*(L-1))
}
