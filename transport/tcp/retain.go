package tcp

import (
	"sync"
	"sync/atomic"
	"time"
)

// What a Session keeps of the bytes it sent, until the peer acknowledges them (see
// session.go): references to the writer's own memory while the writer promises not to
// change it (WriteKept, until Settle), copies where it does not (Write's return, a
// frame header), and one process-wide budget that bounds the copies.

// span is a piece of the stream kept for resends: stream bytes [off, off+len(b)).
type span struct {
	off   uint64
	b     []byte
	owned bool // a copy charged to the budget; else the writer's memory
}

// retained is a session's kept bytes: contiguous spans in stream order.
type retained struct {
	spans []span
}

// add keeps b at stream offset off (right after the last span), by reference or,
// with owned, as a copy charged to the budget.
func (r *retained) add(off uint64, b []byte, owned bool) {
	if len(b) == 0 {
		return
	}
	if owned {
		b = append([]byte(nil), b...)
		retainBudget.charge(len(b))
	}
	r.spans = append(r.spans, span{off: off, b: b, owned: owned})
}

// trim drops every byte before acked: the peer has it.
func (r *retained) trim(acked uint64) {
	i := 0
	for ; i < len(r.spans); i++ {
		sp := &r.spans[i]
		end := sp.off + uint64(len(sp.b))
		if end > acked {
			if sp.off < acked {
				k := int(acked - sp.off)
				if sp.owned {
					retainBudget.release(k)
				}
				sp.b, sp.off = sp.b[k:], acked
			}
			break
		}
		if sp.owned {
			retainBudget.release(len(sp.b))
		}
	}
	if i > 0 {
		n := copy(r.spans, r.spans[i:])
		clear(r.spans[n:])
		r.spans = r.spans[:n]
	}
}

// dropAfter forgets the bytes at and after end: they never went out.
func (r *retained) dropAfter(end uint64) {
	for len(r.spans) > 0 {
		sp := &r.spans[len(r.spans)-1]
		if sp.off >= end {
			if sp.owned {
				retainBudget.release(len(sp.b))
			}
			r.spans[len(r.spans)-1] = span{}
			r.spans = r.spans[:len(r.spans)-1]
			continue
		}
		if k := int(sp.off + uint64(len(sp.b)) - min(end, sp.off+uint64(len(sp.b)))); k > 0 {
			if sp.owned {
				retainBudget.release(k)
			}
			sp.b = sp.b[:len(sp.b)-k]
		}
		return
	}
}

// lo is the first stream byte still kept (end when nothing is).
func (r *retained) lo(end uint64) uint64 {
	if len(r.spans) == 0 {
		return end
	}
	return r.spans[0].off
}

// referenced is how many kept bytes are the writer's memory.
func (r *retained) referenced() int {
	n := 0
	for _, sp := range r.spans {
		if !sp.owned {
			n += len(sp.b)
		}
	}
	return n
}

// own copies every referenced span (the budget charged for them already).
func (r *retained) own() {
	for i := range r.spans {
		if sp := &r.spans[i]; !sp.owned {
			sp.b, sp.owned = append([]byte(nil), sp.b...), true
		}
	}
}

// owned is how many kept bytes are copies.
func (r *retained) owned() int {
	n := 0
	for _, sp := range r.spans {
		if sp.owned {
			n += len(sp.b)
		}
	}
	return n
}

// slices appends the kept bytes [from, to) to dst as references into the spans.
func (r *retained) slices(dst [][]byte, from, to uint64) [][]byte {
	for _, sp := range r.spans {
		end := sp.off + uint64(len(sp.b))
		if end <= from || sp.off >= to {
			continue
		}
		lo, hi := max(sp.off, from)-sp.off, min(end, to)-sp.off
		dst = append(dst, sp.b[lo:hi])
	}
	return dst
}

// release drops everything kept (a session that closed or failed).
func (r *retained) release() {
	for _, sp := range r.spans {
		if sp.owned {
			retainBudget.release(len(sp.b))
		}
	}
	clear(r.spans)
	r.spans = r.spans[:0]
}

// budget bounds the bytes every session of the process holds as copies
// (GONCCL_LINK_BUFFER_MB). Small copies (frame headers, the bytes of a short write)
// are charged whatever the budget says; a writer whose unacknowledged bytes do not
// fit waits for acknowledgements instead of copying them (Session.settle).
type budget struct {
	used  atomic.Int64
	limit atomic.Int64
	peak  atomic.Int64
	mu    sync.Mutex
	freed chan struct{} // closed and replaced when bytes are released
}

// DefaultRetainLimit is the budget's default: 64 MiB a process, 4 GiB on a host of 64
// ranks.
const DefaultRetainLimit = 64 << 20

var retainBudget = newBudget(DefaultRetainLimit)

func newBudget(limit int64) *budget {
	b := &budget{freed: make(chan struct{})}
	b.limit.Store(limit)
	return b
}

// SetRetainLimit sets the process-wide budget for copies of unacknowledged bytes.
func SetRetainLimit(bytes int64) { retainBudget.limit.Store(bytes) }

// RetainedBytes is what every session of the process holds as copies now, and the
// most it held at once.
func RetainedBytes() (now, peak int64) { return retainBudget.used.Load(), retainBudget.peak.Load() }

func (b *budget) charge(n int) {
	u := b.used.Add(int64(n))
	for p := b.peak.Load(); u > p && !b.peak.CompareAndSwap(p, u); p = b.peak.Load() {
	}
}

// take charges n if it fits the limit (or is small), and reports whether it did.
func (b *budget) take(n int) bool {
	for {
		u := b.used.Load()
		if n > smallCopy && u+int64(n) > b.limit.Load() {
			return false
		}
		if b.used.CompareAndSwap(u, u+int64(n)) {
			b.charge(0)
			return true
		}
	}
}

func (b *budget) release(n int) {
	if n == 0 {
		return
	}
	b.used.Add(-int64(n))
	b.mu.Lock()
	close(b.freed)
	b.freed = make(chan struct{})
	b.mu.Unlock()
}

// changed returns a channel closed at the next release.
func (b *budget) changed() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.freed
}

// smallCopy is the size up to which a copy is charged whatever the budget says.
const smallCopy = 64 << 10

// settleWait is how long a writer over the budget waits for acknowledgements at a
// time before it looks again.
const settleWait = 20 * time.Millisecond

// Sessions that hold copies are looked at every sweepEvery for acknowledgements that
// arrived while nobody read their connection (the link to a ring's next rank is only
// written), so that a session that went idle holds nothing for long.
const sweepEvery = 20 * time.Millisecond

var sweep struct {
	mu      sync.Mutex
	holders map[*Session]struct{}
	running bool
}

// sweepLater has s looked at until it holds no copies.
func sweepLater(s *Session) {
	sweep.mu.Lock()
	defer sweep.mu.Unlock()
	if sweep.holders == nil {
		sweep.holders = map[*Session]struct{}{}
	}
	sweep.holders[s] = struct{}{}
	if !sweep.running {
		sweep.running = true
		go sweeper()
	}
}

// sweeper takes the acknowledgements of every holder until none holds copies.
func sweeper() {
	for {
		time.Sleep(sweepEvery)
		sweep.mu.Lock()
		ss := make([]*Session, 0, len(sweep.holders))
		for s := range sweep.holders {
			ss = append(ss, s)
		}
		sweep.mu.Unlock()
		var done []*Session
		for _, s := range ss {
			s.pumpAcks(time.Time{})
			s.mu.Lock()
			if s.kept.owned() == 0 || s.err != nil {
				done = append(done, s)
			}
			s.mu.Unlock()
		}
		sweep.mu.Lock()
		for _, s := range done {
			delete(sweep.holders, s)
		}
		if len(sweep.holders) == 0 {
			sweep.running = false
			sweep.mu.Unlock()
			return
		}
		sweep.mu.Unlock()
	}
}
