package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gonccl/gonccl/transport"
)

// vArgs are alltoallv's per-peer counts and displacements, in elements.
type vArgs struct {
	sendCounts, sendDispls, recvCounts, recvDispls []int
}

// alltoAllPairwise sends block j of send to rank j, which stores it as block r of
// its recv (r the sender); this rank's own block is copied locally. Pairwise
// exchange: the s-th send goes to rank r+s while the s-th receive comes from rank
// r-s, s = 1..n-1, so every rank sends to and receives from one peer at a time and
// no link waits on another. Sends and receives run on two goroutines; every pair
// exchanges a frame, even an empty one, so that ranks that disagree on the call
// find out.
//
//	n = 4, rank 1:  sends to    2 3 0
//	                receives    0 3 2
//
// sendBlock(j) and recvBlock(j) give the bytes for peer j; frames to and from peer
// j carry sendCount(j) and recvCount(j) as their header count (alltoall: the count
// per peer; alltoallv: the pair's own count). With a, the exchange starts with the
// agreement round (agreement, below), and data moves only once it has passed.
func (e *exec) alltoAllPairwise(sendBlock, recvBlock func(j int) []byte, sendCount, recvCount func(j int) int, a *vArgs) error {
	n, r := e.nranks, e.rank
	copyIfDistinct(recvBlock(r), sendBlock(r))
	pre := 0 // agreement units before the data
	var agree *agreement
	if a != nil {
		pre, agree = n-1, &agreement{e: e, a: a}
	}
	return e.pipeline(pipe{
		nsend: pre + n - 1, nrecv: pre + n - 1,
		need: func(u int) int { // data waits for the agreement; nothing else waits
			if u < pre {
				return 0
			}
			return pre
		},
		send: func(u int) error {
			if u < pre {
				return agree.send(mod(r+u+1, n))
			}
			p := mod(r+u-pre+1, n)
			return e.sendChunkedCount(p, uint64(sendCount(p)), sendBlock(p))
		},
		recv: func(u int) error {
			if u < pre {
				return agree.recv(mod(r-u-1, n), u == pre-1)
			}
			p := mod(r-u+pre-1, n)
			return e.recvChunkedCount(p, uint64(recvCount(p)), recvBlock(p))
		},
	})
}

// agreement checks, before any alltoallv data moves, that every pair of ranks
// agrees on the counts between them, so that a disagreement fails on both ranks of
// the pair with the same message ("rank 0 sent 5 elements to rank 1, which expected
// 4") instead of on the receiver only. Every rank sends each peer one empty frame
// whose header carries what it sends to that peer (Count) and what it expects from
// it (Offset), in the pairwise order of the data; a rank looks at every peer's frame
// before it fails, so that its own frames all go out.
type agreement struct {
	e          *exec
	a          *vArgs
	mismatches []string // used by the receiving goroutine only
}

func (g *agreement) send(p int) error {
	h := g.e.hdr
	h.Count, h.Offset = uint64(g.a.sendCounts[p]), uint64(g.a.recvCounts[p])
	if err := g.e.linkSend(p, &h, nil); err != nil {
		return g.e.linkErr(p, err)
	}
	return nil
}

// recv checks peer p's frame; after the last one it fails if any pair disagreed.
func (g *agreement) recv(p int, last bool) error {
	e, r := g.e, g.e.rank
	h := e.hdr
	h.Count, h.Offset = uint64(g.a.recvCounts[p]), uint64(g.a.sendCounts[p])
	err := e.linkRecv(p, &h, nil)
	var m *transport.MismatchError
	switch {
	case err == nil:
	case errors.As(err, &m) && m.Got.Kind == m.Want.Kind && m.Got.Seq == m.Want.Seq &&
		m.Got.DType == m.Want.DType && m.Got.Len == 0:
		if m.Got.Count != m.Want.Count {
			g.mismatches = append(g.mismatches, fmt.Sprintf("rank %d sent %d elements to rank %d, which expected %d",
				p, m.Got.Count, r, m.Want.Count))
		}
		if m.Got.Offset != m.Want.Offset {
			g.mismatches = append(g.mismatches, fmt.Sprintf("rank %d sent %d elements to rank %d, which expected %d",
				r, m.Want.Offset, p, m.Got.Offset))
		}
	default:
		return e.linkErr(p, err)
	}
	if last && len(g.mismatches) > 0 {
		return fmt.Errorf("%w: %s", ErrMismatch, strings.Join(g.mismatches, "; "))
	}
	return nil
}
