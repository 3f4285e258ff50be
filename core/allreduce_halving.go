package core

import "sync"

// allReduceHalving reduces buf (count elements) across all ranks in place: a
// reduce-scatter by recursive halving, then an all-gather by recursive doubling
// (Rabenseifner's algorithm). Each rank sends and reduces the same bytes as in the
// ring, 2(n-1)/n of the buffer, but in 2*log2(n) steps instead of 2(n-1): where a
// step's latency dominates (many ranks, or more ranks than cores, where every step
// waits for the next process to be scheduled) it is far faster.
//
// The buffer is cut into p2 blocks (p2: the largest power of two <= n). At halving
// step d = p2/2, p2/4, ..., 1, virtual rank v and its partner v^d split the blocks they
// both still reduce: the one with bit d clear keeps the lower half and sends the upper,
// the other the reverse, and each reduces what it receives into the half it keeps.
// After log2(p2) steps v holds block v, finished. The doubling steps d = 1, 2, ...,
// p2/2 then swap finished ranges with partner v^d until every rank has every block:
//
//	p2 = 4, v = 1:   d=2: keep blocks 0-1, send 2-3 to v=3    (reduce-scatter)
//	                 d=1: keep block 1, send block 0 to v=0
//	                 d=1: swap block 1 for block 0 with v=0   (all-gather)
//	                 d=2: swap blocks 0-1 for 2-3 with v=3
//
// When n is not a power of two the ranks beyond p2 fold in first, as in recursive
// doubling (allReduceRD): each of the first 2*(n-p2) even ranks hands its whole buffer
// to the odd rank above it, which takes part as virtual rank r/2 and hands the
// result back at the end. Every block is finished on one rank and copied from there,
// so all ranks end bit-identical.
func (e *exec) allReduceHalving(buf []byte, count int, dt DataType, op RedOp) error {
	n, r, es := e.nranks, e.rank, dt.Size()
	p2 := 1
	for p2*2 <= n {
		p2 *= 2
	}
	rem := n - p2
	whole := elemRange{0, count}
	vr := r - rem
	if r < 2*rem {
		if r%2 == 0 {
			if err := e.swapRanges(r+1, buf, es, whole, elemRange{}, false, dt, op); err != nil {
				return err
			}
			vr = -1
		} else {
			if err := e.swapRanges(r-1, buf, es, elemRange{}, whole, true, dt, op); err != nil {
				return err
			}
			vr = r / 2
		}
	}
	if vr >= 0 {
		peerOf := func(pv int) int {
			if pv < rem {
				return 2*pv + 1
			}
			return pv + rem
		}
		blocks := func(lo, hi int) elemRange { // blocks lo..hi-1 as elements
			a, _ := split(count, p2, lo)
			b, _ := split(count, p2, hi)
			if hi == p2 {
				b = count
			}
			return elemRange{a, b}
		}
		lo, err := e.halve(vr, p2, peerOf, blocks, buf, es, dt, op)
		if err != nil {
			return err
		}
		if op == Avg {
			mine := blocks(vr, vr+1)
			if err := DivideBy(buf[mine.lo*es:mine.hi*es], dt, n); err != nil {
				return err
			}
		}
		for d := 1; d < p2; d *= 2 {
			theirs := lo ^ d
			if err := e.swapRanges(peerOf(vr^d), buf, es, blocks(lo, lo+d), blocks(theirs, theirs+d), false, dt, op); err != nil {
				return err
			}
			lo = min(lo, theirs)
		}
	}
	if r < 2*rem {
		if r%2 == 1 {
			return e.swapRanges(r-1, buf, es, whole, elemRange{}, false, dt, op)
		}
		return e.swapRanges(r+1, buf, es, elemRange{}, whole, false, dt, op)
	}
	return nil
}

// elemRange is elements lo..hi-1 of a buffer.
type elemRange struct{ lo, hi int }

// swapRanges sends buf's elements give to peer while it receives elements take from
// the same peer, each in frames of at most chunkBytes at their byte offset in buf; with
// reduce, what arrives is reduced into take (take op= received), else it overwrites it.
// An empty range sends or receives nothing; both ends of a pair compute the same
// ranges, so their frames match.
func (e *exec) swapRanges(peer int, buf []byte, es int, give, take elemRange, reduce bool, dt DataType, op RedOp) error {
	perChunk := max(1, e.chunkBytes/es)
	chunks := func(x elemRange, each func(lo, hi int) error) error {
		for a := x.lo; a < x.hi; a += perChunk {
			if err := each(a*es, min(a+perChunk, x.hi)*es); err != nil {
				return err
			}
		}
		return nil
	}
	// Chunks the links take whole go out on this goroutine (see sendNow); a goroutine
	// sends the rest, from the first that did not fit, while this one receives.
	for give.hi > give.lo {
		hi := min(give.lo+perChunk, give.hi)
		sent, err := e.sendNow(peer, give.lo*es, buf[give.lo*es:hi*es])
		if err != nil {
			e.fail(err)
			return e.result()
		}
		if !sent {
			break
		}
		give.lo = hi
	}
	var wg sync.WaitGroup
	defer e.joinOnPanic(nil, &wg)
	if give.hi > give.lo {
		e.guard.Go("halving sender", &wg, e.fail, func() {
			if err := chunks(give, func(lo, hi int) error { return e.sendKept(peer, lo, buf[lo:hi]) }); err != nil {
				e.fail(err)
			}
		})
	}
	err := chunks(take, func(lo, hi int) error {
		if reduce {
			return e.recvReduce(peer, lo, buf[lo:hi], dt, op)
		}
		return e.recv(peer, lo, buf[lo:hi])
	})
	if err != nil {
		e.fail(err)
	}
	wg.Wait()
	return e.result()
}

// halve runs the halving steps of virtual rank vr among p2 (a power of two): at step
// d = p2/2, ..., 1, vr and vr^d (real rank peerOf(vr^d)) split the virtual ranks
// lo..hi-1 whose blocks they both still reduce: the one with bit d clear keeps the
// lower half and sends the upper, the other the reverse, each reducing the half it
// keeps. blocks(a, b) is virtual ranks a..b-1's part of buf, as elements. It returns
// lo: after the last step vr holds virtual block lo (= vr) finished.
func (e *exec) halve(vr, p2 int, peerOf func(int) int, blocks func(lo, hi int) elemRange, buf []byte, es int, dt DataType, op RedOp) (int, error) {
	lo, hi := 0, p2
	for d := p2 / 2; d >= 1; d /= 2 {
		keep, give := blocks(lo, lo+d), blocks(lo+d, hi)
		if vr&d != 0 {
			keep, give = give, keep
			lo += d
		} else {
			hi -= d
		}
		if err := e.swapRanges(peerOf(vr^d), buf, es, give, keep, true, dt, op); err != nil {
			return lo, err
		}
	}
	return lo, nil
}
