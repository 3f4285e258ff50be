package core

import (
	"fmt"
	"math/bits"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/tcp"
)

// edgeLink counts the frames sent over a link, per (from, to).
type edgeLink struct {
	transport.Link
	from, to int
	sent     *sync.Map
}

func (l *edgeLink) Send(h *transport.Header, p []byte, dl time.Time) error {
	l.sent.Store([2]int{l.from, l.to}, true)
	return l.Link.Send(h, p, dl)
}

// treeExecs are n execs of one operation over in-memory links that record which
// pairs carried frames.
func treeExecs(t *testing.T, n int, sent *sync.Map) []*exec {
	links := make([][]transport.Link, n)
	for i := range links {
		links[i] = make([]transport.Link, n)
	}
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			a, b := net.Pipe()
			links[i][j] = &edgeLink{tcp.NewStreamLink(j, a), i, j, sent}
			links[j][i] = &edgeLink{tcp.NewStreamLink(i, b), j, i, sent}
		}
	}
	es := make([]*exec, n)
	for r := range es {
		es[r] = &exec{rank: r, nranks: n, peers: fixedPeers(r, links[r]),
			hdr:      transport.Header{Seq: 1, Kind: uint8(KindAllReduce), Root: -1, Algo: uint8(AlgoZeroCopy)},
			deadline: time.Now().Add(10 * time.Second), breakLinks: func() {},
			sendHdrs: make([]transport.Header, n), recvHdrs: make([]transport.Header, n)}
	}
	t.Cleanup(func() {
		for r := range links {
			for _, l := range links[r] {
				if l != nil {
					l.Close()
				}
			}
		}
	})
	return es
}

// isTreeEdge says whether relative ranks a and b are parent and child in the binomial
// tree: the lower one has zeros below the bit they differ by.
func isTreeEdge(a, b int) bool {
	lo, hi := min(a, b), max(a, b)
	d := hi - lo
	return bits.OnesCount(uint(d)) == 1 && lo&(2*d-1) == 0
}

// gatherTree brings every rank's block to the root in relative rank order, and the
// gather and the broadcast back down use only the tree's links (each rank at most
// log2(n)+1 of them), whose ends treeParent and treeChildren name.
func TestGatherTree(t *testing.T) {
	for n := 1; n <= 17; n++ {
		for _, root := range []int{0, n / 2, n - 1} {
			var sent sync.Map
			es := treeExecs(t, n, &sent)
			const per = 3
			alls := make([][]byte, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r, e := range es {
				alls[r] = make([]byte, n*per)
				vr := mod(r-root, n)
				for k := range per {
					alls[r][vr*per+k] = byte(r*per + k + 1)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if errs[r] = e.gatherTree(zcOffDescribe, alls[r], per, root); errs[r] == nil {
						errs[r] = e.broadcastTree(alls[r], root)
					}
				}()
			}
			wg.Wait()
			name := fmt.Sprintf("n=%d root=%d", n, root)
			for r := range es {
				require.NoError(t, errs[r], name)
				for vr := range n {
					p := mod(vr+root, n)
					for k := range per {
						require.Equal(t, byte(p*per+k+1), alls[r][vr*per+k], "%s: rank %d's copy of rank %d's block", name, r, p)
					}
				}
			}
			sent.Range(func(k, _ any) bool {
				e := k.([2]int)
				require.True(t, isTreeEdge(mod(e[0]-root, n), mod(e[1]-root, n)), "%s: a frame from %d to %d, off the tree", name, e[0], e[1])
				return true
			})
			for r, e := range es {
				p, ok := e.treeParent(root)
				require.Equal(t, r != root, ok, name)
				if ok {
					_, used := sent.Load([2]int{r, p})
					require.True(t, used, "%s: rank %d never sent to its parent %d", name, r, p)
				}
				for _, kid := range e.treeChildren(root) {
					q, ok := es[kid].treeParent(root)
					require.True(t, ok && q == r, "%s: rank %d's child %d has parent %d", name, r, kid, q)
				}
			}
		}
	}
}

// asks is how many describe steps each rank has run; every rank agrees.
func asks(t *testing.T, comms []*Comm) uint64 {
	t.Helper()
	a := comms[0].zc.asks
	for _, c := range comms {
		require.Equal(t, a, c.zc.asks, "rank %d", c.rank)
	}
	return a
}

// Ordinary buffers ask once per kind of operation, then never again; buffers that
// become gonccl's are learned from the usual algorithm's own frames and run
// zero-copy from the operation after; one rank's ordinary buffer sends every rank
// back, each time with exact results.
func TestZeroCopyLearnsWithoutAsking(t *testing.T) {
	const count = 5000
	for _, n := range []int{2, 3, 5} {
		comms := zcComms(t, n, nil)
		ordinary := func(_, k int) []byte { return make([]byte, k) }
		sharedAt := func(_, k int) []byte { return shared(t, k, 0) }
		oneOrdinary := func(r, k int) []byte {
			if r == n-1 {
				return make([]byte, k)
			}
			return shared(t, k, 0)
		}
		steps := []struct {
			alloc    func(r, k int) []byte
			asks     uint64
			zeroCopy bool
		}{
			{ordinary, 1, false}, // nothing learned yet: ask
			{ordinary, 1, false}, // learned "not ready": no asking
			{ordinary, 1, false},
			{sharedAt, 1, false}, // still "not ready": learns "ready" from the frames
			{sharedAt, 2, true},  // asks, and runs zero-copy
			{sharedAt, 3, true},
			{oneOrdinary, 4, false}, // asks; the last rank's buffer sends all back
			{oneOrdinary, 4, false},
			{sharedAt, 4, false},
			{sharedAt, 5, true},
		}
		for i, s := range steps {
			name := fmt.Sprintf("n=%d step %d", n, i)
			zcAllReduce(t, comms, count, Float32, Sum, i%2 == 0, int64(i), s.alloc, name)
			require.Equal(t, s.asks, asks(t, comms), "%s: describe steps run", name)
			requireAlgo(t, comms, AlgoZeroCopy, !s.zeroCopy, name)
		}
		// Another kind of operation (another count) is asked about afresh.
		zcAllReduce(t, comms, count+1, Float32, Sum, true, 99, ordinary, "another count")
		require.Equal(t, uint64(6), asks(t, comms))
	}
}

// A broadcast needs only the root's buffer in gonccl's memory: the others' ordinary
// buffers neither stop it nor make it ask again.
func TestZeroCopyBroadcastLearnsFromTheRoot(t *testing.T) {
	const n, count = 4, 3000
	comms := zcComms(t, n, nil)
	for i, rootShared := range []bool{false, false, true, true, true} {
		const root = 1
		ins := make([][]byte, n)
		bufs := make([][]byte, n)
		for r := range bufs {
			ins[r] = inputs(Int32, Sum, count, r, int64(i))
			if r == root && rootShared {
				bufs[r] = shared(t, 4*count, 0)
			} else {
				bufs[r] = make([]byte, 4*count)
			}
			copy(bufs[r], ins[r])
		}
		errs := onAll(t, comms, func(c *Comm) (*Request, error) {
			return c.Broadcast(bufs[c.rank], bufs[c.rank], count, Int32, root)
		})
		for r := range comms {
			require.NoError(t, errs[r])
			require.Equal(t, ins[root], bufs[r], "step %d rank %d", i, r)
		}
		wantZC := i >= 3 // step 2 learns, step 3 asks and runs zero-copy
		requireAlgo(t, comms, AlgoZeroCopy, !wantZC, fmt.Sprintf("step %d", i))
	}
	require.Equal(t, uint64(3), asks(t, comms)) // steps 0, 3 and 4
}

// More ranks than zcMaxRanks never run zero-copy (nor ask).
func TestZeroCopyRankBound(t *testing.T) {
	comms := zcComms(t, zcMaxRanks+1, nil)
	zcAllReduce(t, comms, 1000, Float32, Sum, true, 1, func(_, k int) []byte { return shared(t, k, 0) }, "beyond the bound")
	requireAlgo(t, comms, AlgoZeroCopy, true, "beyond the bound")
	for _, c := range comms {
		require.Nil(t, c.zc, "rank %d", c.rank)
	}
}

// The learned verdicts are bounded; the oldest kind is forgotten first.
func TestZeroCopyLearnedIsBounded(t *testing.T) {
	var l zcLearned
	for i := range zcMaxLearned + 10 {
		l.put(zcSig{count: i}, i%2 == 0)
	}
	require.Len(t, l.ready, zcMaxLearned)
	_, known := l.get(zcSig{count: 9})
	require.False(t, known)
	ready, known := l.get(zcSig{count: 10})
	require.True(t, known)
	require.True(t, ready)
	l.put(zcSig{count: 10}, false) // an update keeps its place
	ready, _ = l.get(zcSig{count: 10})
	require.False(t, ready)
	require.Len(t, l.order, zcMaxLearned)
}
