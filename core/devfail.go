package core

import "time"

// FailDevice breaks the communicator with err, a failure of its device path that
// capi's watcher found (package cuda, devfault.go): a device operation on the GPU past
// the timeout, ranks that called different operations, a peer's loss that released
// the streams. It does what a failed executor operation does: later operations fail
// with err (Err), the links are failed so that the peers' operations on them fail
// too, a lost rank's grace is cut short; and the device operations still on the GPU
// are marked failed in the flight recorder with err (their outputs are not valid),
// the first failure writing the dump. If err is the communicator's cause (the first,
// or a mismatch after a peer's vaguer report), the peers are told (devreport.go), so
// that each breaks with it even if its own watcher never sees it.
func (c *Comm) FailDevice(err error) {
	c.mu.Lock()
	hurry := c.lost != nil && !c.lostNow && !c.aborted
	cause := c.setCauseLocked("device path", err)
	c.mu.Unlock()
	if cause && c.p2p != nil {
		// Only this rank may have seen it: the peers are told (devreport.go).
		c.p2p.tellFailed(c.rank, -1, err.Error(), failClass(err))
	}
	if hurry {
		c.lossFailedOp()
	}
	c.failLinks()
	if c.trace.failDevice(err) {
		c.autoDump("failure: " + err.Error())
	}
}

// failDevice marks every device-path entry not seen finished failed with err; true
// if this is the recorder's first failure.
func (f *flightRecorder) failDevice(err error) (firstFailure bool) {
	if f == nil {
		return false
	}
	now := time.Now().UnixNano()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ring := range [2][]traceSlot{f.ring, f.p2p} { // collectives, sends and receives
		for i := range ring {
			if s := &ring[i]; s.device && (s.state == TraceQueued || s.state == TraceStarted) {
				s.state, s.finished, s.poll, s.err = TraceFailed, now, nil, "released: "+err.Error()
			}
		}
	}
	if !f.dumpedFail {
		f.dumpedFail = true
		return true
	}
	return false
}
