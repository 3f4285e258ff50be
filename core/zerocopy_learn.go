package core

import (
	"sync/atomic"

	"github.com/gonccl/gonccl/transport"
)

// What a communicator learns about its zero-copy candidates without asking (see
// zerocopy.go): after an operation that ran its usual algorithm because some rank's
// buffer was ordinary memory, the next one like it runs its usual algorithm at once,
// and learns from the flag its frames carry whether every rank could have run it
// zero-copy after all.

// zcSig identifies operations alike: the same on every rank for one collective.
type zcSig struct {
	kind  Kind
	dtype DataType
	redop RedOp
	root  int
	count int
}

func zcSigOf(o *op) zcSig {
	return zcSig{kind: o.kind, dtype: o.dtype, redop: o.redop, root: o.root, count: o.count}
}

// zcMaxLearned bounds the kinds of operation a communicator remembers; the oldest is
// forgotten first. Every rank runs the same operations in the same order, so every
// rank remembers and forgets alike.
const zcMaxLearned = 256

// zcLearned maps each kind of operation to whether its last run found every rank
// ready for the zero-copy path.
type zcLearned struct {
	ready map[zcSig]bool
	order []zcSig // first learned first
}

func (l *zcLearned) get(s zcSig) (ready, known bool) {
	ready, known = l.ready[s]
	return ready, known
}

func (l *zcLearned) put(s zcSig, ready bool) {
	if l.ready == nil {
		l.ready = map[zcSig]bool{}
	}
	if _, ok := l.ready[s]; !ok {
		if len(l.order) == zcMaxLearned {
			delete(l.ready, l.order[0])
			l.order = l.order[1:]
		}
		l.order = append(l.order, s)
	}
	l.ready[s] = ready
}

// What an operation's frames say (exec.zcState): it is not learning, or every rank
// heard from so far is ready, or one is not.
const (
	zcNotLearning uint32 = iota
	zcAllReady
	zcSomeNotReady
)

// zcLearning is the learning state of one operation.
type zcLearning struct {
	sig   zcSig
	state atomic.Uint32
}

// zcLearn makes the operation learn whether its kind can run zero-copy, starting
// from whether this rank can.
func (e *exec) zcLearn(s zcSig, ready bool) {
	e.zc.sig = s
	if ready {
		e.zc.state.Store(zcAllReady)
	} else {
		e.zc.state.Store(zcSomeNotReady)
	}
}

// zcFlags are the flags a frame sent now carries.
func (e *exec) zcFlags() uint8 {
	if e.zc.state.Load() == zcAllReady {
		return transport.FlagZeroCopyReady
	}
	return 0
}

// zcHeard takes in the flags of a frame received.
func (e *exec) zcHeard(flags uint8) {
	if flags&transport.FlagZeroCopyReady == 0 {
		e.zc.state.CompareAndSwap(zcAllReady, zcSomeNotReady)
	}
}

// zcLearned records, after the operation succeeded, what it learned.
func (c *Comm) zcLearned(e *exec) {
	if st := e.zc.state.Load(); st != zcNotLearning {
		c.zcState().learned.put(e.zc.sig, st == zcAllReady)
	}
}
