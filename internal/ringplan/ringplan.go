// Package ringplan is the plan of the ring all-reduce, apart from whoever carries it
// out: which segment of the buffer each rank sends and receives at each step, which
// steps reduce, and how a segment is cut into chunks. core's host stepper
// (core/allreduce_ring.go) moves the bytes over links; cuda's device stepper
// (cuda/devring.go) with peer copies and reduction kernels on a stream. One plan, so
// the two cannot drift apart.
//
// The buffer (Count elements) is cut into N segments. At reduce-scatter step s
// (0 <= s < N-1) rank r sends segment r-s to rank r+1 and receives segment r-s-1 from
// rank r-1, reducing it into its own copy; after N-1 steps rank r holds the full
// reduction of segment r+1. The all-gather steps N-1 .. 2N-3 then pass the finished
// segments around the ring:
//
//	step:          RS 0    RS 1    AG 0    AG 1        (N = 3, rank r)
//	sends seg:     r       r-1     r+1     r
//	receives seg:  r-1     r-2     r       r-1
//
// What a rank sends at step s+1 is what it received at step s. The package does no
// I/O and holds no state beyond the plan's shape.
package ringplan

// AllReduce is the ring all-reduce's plan for one rank.
type AllReduce struct {
	N, Rank  int // the ranks in the ring, and this one
	Count    int // elements in the buffer
	ElemSize int // bytes per element
	Chunks   int // chunks per segment (at least 1)
}

// NewAllReduce plans an all-reduce of count elements of elemSize bytes across n ranks
// for rank, cutting each segment into chunks of about chunkBytes.
func NewAllReduce(n, rank, count, elemSize, chunkBytes int) AllReduce {
	seg := CeilDiv(count, n) * elemSize
	return AllReduce{N: n, Rank: rank, Count: count, ElemSize: elemSize,
		Chunks: max(1, CeilDiv(seg, max(1, chunkBytes)))}
}

// Steps is the number of steps: N-1 of reduce-scatter, then N-1 of all-gather.
func (p AllReduce) Steps() int { return 2 * (p.N - 1) }

// Reduces reports whether step s reduces what it receives (reduce-scatter) rather
// than keeping it as it is (all-gather).
func (p AllReduce) Reduces(s int) bool { return s < p.N-1 }

// Finishes reports whether step s is the one after which the segment it received is
// fully reduced (the last reduce-scatter step): where an average divides.
func (p AllReduce) Finishes(s int) bool { return s == p.N-2 }

// Next and Prev are the ranks this rank sends to and receives from.
func (p AllReduce) Next() int { return Mod(p.Rank+1, p.N) }
func (p AllReduce) Prev() int { return Mod(p.Rank-1, p.N) }

// SendSeg is the segment this rank sends at step s.
func (p AllReduce) SendSeg(s int) int {
	if s < p.N-1 {
		return Mod(p.Rank-s, p.N)
	}
	return Mod(p.Rank+1-(s-(p.N-1)), p.N)
}

// RecvSeg is the segment this rank receives at step s: SendSeg(s+1), and the segment
// its predecessor sends at step s.
func (p AllReduce) RecvSeg(s int) int {
	if s < p.N-1 {
		return Mod(p.Rank-s-1, p.N)
	}
	return Mod(p.Rank-(s-(p.N-1)), p.N)
}

// Chunk is the byte range [lo, hi) of chunk j of segment seg.
func (p AllReduce) Chunk(seg, j int) (lo, hi int) {
	slo, shi := Split(p.Count, p.N, seg)
	clo, chi := Split(shi-slo, p.Chunks, j)
	return (slo + clo) * p.ElemSize, (slo + chi) * p.ElemSize
}

// Units is the number of (step, chunk) units, Steps()*Chunks; unit u is chunk
// u%Chunks of step u/Chunks. A unit needs the unit Chunks earlier (the same chunk one
// step before) to have been received.
func (p AllReduce) Units() int { return p.Steps() * p.Chunks }

// Split returns part i's range [lo, hi) when n items are cut into parts near-equal
// parts (in 64 bits, so n*i cannot overflow).
func Split(n, parts, i int) (lo, hi int) {
	return int(int64(n) * int64(i) / int64(parts)), int(int64(n) * int64(i+1) / int64(parts))
}

// CeilDiv is a/b rounded up, for positive b.
func CeilDiv(a, b int) int { return (a + b - 1) / b }

// Mod is a mod n in [0, n).
func Mod(a, n int) int { return ((a % n) + n) % n }
