package core

import "math/bits"

// gatherTree gathers per bytes from every rank to root along the binomial tree that
// broadcastTree uses, run backwards. all holds a block per rank in relative rank order
// (rank - root mod n; with root 0, rank order), this rank's own already in place. In
// round k a rank whose relative rank has bit k set sends everything it holds, its own
// block and its subtree's, [vr, vr+2^k), to the rank 2^k below it and drops out; the
// others receive [vr+2^k, vr+2^(k+1)) from the rank 2^k above them (if any). Root
// holds every block after log2(n) rounds, and each rank used only its tree links.
// With per = 0 (all nil) it is the tree's "everyone below me is done" wave.
//
//	relative rank:  1 -> 0, 3 -> 2, 5 -> 4, 7 -> 6;  2 -> 0, 6 -> 4;  4 -> 0
func (e *exec) gatherTree(off int, all []byte, per, root int) error {
	n := e.nranks
	vr := mod(e.rank-root, n)
	span := func(lo, hi int) []byte { return all[lo*per : min(hi, n)*per] }
	for mask := 1; mask < n; mask <<= 1 {
		if vr&mask != 0 {
			return e.send(mod(vr-mask+root, n), off, span(vr, vr+mask))
		}
		if vr+mask < n {
			if err := e.recv(mod(vr+mask+root, n), off, span(vr+mask, vr+2*mask)); err != nil {
				return err
			}
		}
	}
	return nil
}

// treeParent is the rank this rank sends to in gatherTree (none for root).
func (e *exec) treeParent(root int) (int, bool) {
	vr := mod(e.rank-root, e.nranks)
	if vr == 0 {
		return 0, false
	}
	low := 1 << bits.TrailingZeros(uint(vr))
	return mod(vr-low+root, e.nranks), true
}

// treeChildren are the ranks this rank receives from in gatherTree, in its order.
func (e *exec) treeChildren(root int) []int {
	n := e.nranks
	vr := mod(e.rank-root, n)
	var kids []int
	for mask := 1; mask < n && vr&mask == 0; mask <<= 1 {
		if vr+mask < n {
			kids = append(kids, mod(vr+mask+root, n))
		}
	}
	return kids
}
