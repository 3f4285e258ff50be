package core

import (
	"fmt"
	"runtime"
)

// The time estimator: what an operation would cost, from the cost model that picks its
// algorithm (tuning.go), without running it. torch's compiler asks a backend for such
// estimates (Backend::startTimeEstimate / endTimeEstimate) to plan how communication
// overlaps computation, so an estimate is the time from the caller's issue of the
// operation to its completion as the caller sees it: the fixed cost of one call
// (torch's dispatch and Work included), the copies of the caller's tensors in and out
// (callerBytes) and the chosen algorithm's modelled time. Where a calibration file has
// an entry for this host, size and transport (calibration.go), they are priced with the
// rates fitted to it; else with built-in ones, fitted the same way on a 2-core VM and
// stretched where this host's ranks outnumber its cores.

// KindSendRecv is not an operation kind on the wire: it names a point-to-point message
// (one send matched by one receive) for Estimate.
const KindSendRecv Kind = 64

// callOverheadUS is the fixed cost of one call as torch's caller sees it: torch's
// dispatch and Work, handing the operation to the executor, waking it, completing the
// request and waking the waiter. Fitted to `python -m gonccl.bench --calibrate -np 2`
// on a 2-core x86-64 VM (C ABI callers pay less).
const callOverheadUS = 300.0

// memcpyGBs is the speed of copying the caller's tensors in and out (callerBytes) and
// of a local copy, fitted with callOverheadUS.
const memcpyGBs = 4.0

// Estimate returns the modelled time, in microseconds, of one operation of kind k on a
// message of bytes (the size the model takes: the per-rank buffer; for all_gather and
// reduce_scatter the per-rank block; for gather, scatter and alltoall the block per
// peer), and the algorithm the communicator would choose for it. It runs nothing and
// sends nothing. It fails (ErrInvalidArgument) for a kind it does not know or a
// negative size, and (ErrNotSupported) where GONCCL_ALGO allows no algorithm that
// can run the message, as the operation itself would.
func (c *Comm) Estimate(k Kind, bytes int) (float64, Algo, error) {
	if bytes < 0 {
		return 0, AlgoNone, fmt.Errorf("%w: estimate of %d bytes", ErrInvalidArgument, bytes)
	}
	if k == KindSendRecv {
		if cal := c.calibrated(); cal != nil {
			m := cal.rated(c.sel.m)
			return cal.otherUS + callerBytes(k, c.nranks, bytes)/(cal.copyGBs*1e3) + m.xfer(float64(bytes)), AlgoNone, nil
		}
		return c.builtin(k, bytes, c.sel.m.xfer(float64(bytes))), AlgoNone, nil
	}
	if k.row() == nil || k == KindAlltoAllv {
		return 0, AlgoNone, fmt.Errorf("%w: no estimate for operation kind %d", ErrInvalidArgument, k)
	}
	if c.nranks == 1 {
		return callOverheadUS + float64(bytes)/(memcpyGBs*1e3), AlgoNone, nil
	}
	s := c.sel
	if len(s.rows[k].algos) == 0 {
		return 0, AlgoNone, fmt.Errorf("%w: %s has no modelled algorithm", ErrInvalidArgument, k)
	}
	best, ests := s.evaluate(k, bytes)
	if best < 0 {
		_, err := s.choose(k, bytes) // the same error the operation would get
		return 0, AlgoNone, err
	}
	algo := ests[best].algo
	if cal := c.calibrated(); cal != nil {
		// Measured with this many ranks on this host: the rates include any sharing
		// of cores.
		return cal.price(c.sel.m, s.rows, k, algo, bytes), algo, nil
	}
	return c.builtin(k, bytes, ests[best].us), algo, nil
}

// builtin is the estimate with the built-in rates of an operation of kind k on bytes
// whose algorithm takes algoUS: with the fixed cost and the caller's copies, stretched
// where ranks share cores.
func (c *Comm) builtin(k Kind, bytes int, algoUS float64) float64 {
	return (callOverheadUS + callerBytes(k, c.nranks, bytes)/(memcpyGBs*1e3) + algoUS) * c.sharedCores()
}

// sharedCores is how many ranks of this host take turns on each core (at least 1):
// the model's rates are one rank's on a core of its own, and ranks that outnumber the
// cores run their steps in turn.
func (c *Comm) sharedCores() float64 {
	return max(1, float64(c.sel.m.maxLocal)/float64(runtime.NumCPU()))
}
