package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/cuda/samegpu"
	"github.com/gonccl/gonccl/cuda/topology"
)

// GONCCL_DEVICE_PATH=auto: at a communicator's first operation on device buffers the
// ranks tell each other their GPU (by PCI bus id), whether they could load gonccl's
// kernels and which cost figures they hold (devcost.go); where a GPU is shared, the
// ranks on it say whether they are MPS clients there, in a second round. From that
// every rank derives the same topology, and sets up, together with the others, each
// path that is possible there and that the cost model chooses for some operation and
// size: the same-GPU path when every rank is on one GPU, the device path (its scratch
// even where ranks share a GPU: the model prices the time slices its waits cost). A
// path whose setup any rank cannot do is refused by every rank together (ErrNotShared)
// and left out. Staged is always there. Each collective on device buffers then takes
// the available path the model prices lowest for its kind and size (pathChooser):
// trySameGPU and tryDevice ask, and leave the operation to the next path otherwise.

// autoRecordBytes is the size of a rank's record in auto's setup exchange: ok, MPS
// client, the cost figures' hash, its GPU's bus id and why it cannot take a GPU path.
const (
	autoBusBytes    = 32
	autoReasonBytes = 96
	autoRecordBytes = 1 + 1 + 8 + autoBusBytes + autoReasonBytes
)

// autoRecord is one rank's record.
type autoRecord struct {
	ok     bool // it read its GPU and loaded the kernels
	mps    bool // an MPS client on its GPU (the second round only)
	costs  uint64
	bus    string
	reason string
}

func (r autoRecord) encode() []byte {
	b := make([]byte, autoRecordBytes)
	if r.ok {
		b[0] = 1
	}
	if r.mps {
		b[1] = 1
	}
	binary.LittleEndian.PutUint64(b[2:], r.costs)
	copy(b[10:10+autoBusBytes], r.bus)
	copy(b[10+autoBusBytes:], r.reason)
	return b
}

func decodeAutoRecord(b []byte) autoRecord {
	return autoRecord{ok: b[0] == 1, mps: b[1] == 1, costs: binary.LittleEndian.Uint64(b[2:]),
		bus: nulTrimmed(b[10 : 10+autoBusBytes]), reason: nulTrimmed(b[10+autoBusBytes:])}
}

func nulTrimmed(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// exchangeAuto all-gathers me over c and decodes every rank's record.
func exchangeAuto(c *core.Comm, me autoRecord) ([]autoRecord, error) {
	all, err := hostAllGather(c, me.encode())
	if err != nil {
		return nil, fmt.Errorf("auto's setup exchange: %w", err)
	}
	recs := make([]autoRecord, c.Size())
	for r := range recs {
		recs[r] = decodeAutoRecord(all[r*autoRecordBytes : (r+1)*autoRecordBytes])
	}
	return recs, nil
}

// agreedTopo derives the topology from every rank's record (the same on every rank).
func agreedTopo(recs []autoRecord, scratch int) gpuTopo {
	t := gpuTopo{nranks: len(recs), oneGPU: len(recs) > 1, scratch: scratch}
	byBus := map[string]int{}
	for _, r := range recs {
		byBus[r.bus]++
		if r.bus != recs[0].bus {
			t.oneGPU = false
		}
	}
	t.mps = true
	for _, r := range recs {
		if byBus[r.bus] > 1 {
			t.shared = true
			t.mps = t.mps && r.mps
		}
	}
	return t
}

// setupAuto is devicePath's decision under auto (devMu held, devDecided set): it sets
// up the paths the model may choose and the chooser, and logs what it chose and why.
// detect says whether this rank is an MPS client on the GPU with the bus id it is given.
func (v *views) setupAuto(c *core.Comm, scratch int, detect func(bus string) topology.MPSStatus) error {
	e := v.e
	k, kerr := kernels.Load(v.drv, v.ctx)
	me := autoRecord{costs: e.devCosts.hash()}
	bus, err := v.drv.BusID(v.dev)
	me.bus = bus
	switch {
	case err != nil:
		me.reason = err.Error()
	case kerr != nil:
		me.reason = kerr.Error()
	default:
		me.ok = true
	}
	recs, err := exchangeAuto(c, me)
	if err != nil {
		return err
	}
	for r, rec := range recs {
		if rec.costs != recs[0].costs {
			err := fmt.Errorf("%w: GONCCL_DEVICE_PATH_COST differs between rank 0 and rank %d: it must be the same on every rank, so that they choose the same path for each operation", errUsage, r)
			e.devModeErr = err
			return err
		}
	}
	for r, rec := range recs {
		if !rec.ok {
			logDevice(c, fmt.Sprintf("auto: staged path: rank %d cannot take a GPU path: %s", r, rec.reason))
			return nil
		}
	}
	topo := agreedTopo(recs, scratch)
	mpsLine := ""
	if topo.shared {
		sharing := 0
		for _, r := range recs {
			if r.bus == me.bus {
				sharing++
			}
		}
		why := ""
		if sharing > 1 {
			st := detect(me.bus)
			me.mps, why = st.Client, st.Why
		}
		if recs, err = exchangeAuto(c, me); err != nil {
			return err
		}
		topo = agreedTopo(recs, scratch)
		mpsLine = mpsText(recs, topo, why)
	}
	pc := &pathChooser{costs: e.devCosts, topo: topo}
	pc.avail[pathStaged] = true
	// Set at once: a setup that fails below leaves the paths set up before it chosen by
	// the model, not taken for every operation.
	e.devChoice, e.devKernels, e.devCtx = pc, k, v.ctx
	var notes []string
	refused := [numPaths]bool{}
	candidate := func(p gpuPath) bool {
		return !refused[p] && !pc.avail[p] && (p != pathSameGPU || topo.oneGPU)
	}
	// Set up each candidate the model would choose somewhere, given every candidate
	// not yet refused; a refusal may make another useful, hence the second pass.
	for range 2 {
		for _, p := range []gpuPath{pathSameGPU, pathDevice} {
			if !candidate(p) {
				continue
			}
			try := *pc
			for q := range numPaths {
				try.avail[q] = pc.avail[q] || candidate(q)
			}
			if !try.uses(p) {
				continue
			}
			ok, note, err := v.setupPath(c, p, scratch)
			if err != nil {
				return err
			}
			if note != "" {
				notes = append(notes, note)
			}
			pc.avail[p], refused[p] = ok, !ok
		}
	}
	if e.devShared != nil {
		// A peer lost, an operation on the GPU past the timeout, ranks that disagree:
		// the watcher releases this rank's streams and breaks the communicator, so
		// the next call (and the flight recorder) names the rank (cuda/devfault.go).
		e.devShared.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, Fail: c.FailDevice})
	}
	logDevice(c, autoSummary(pc, mpsLine, notes, e.devShared, e.devRingTo))
	for _, l := range pc.describe() {
		logDevice(c, "auto: "+l)
	}
	return nil
}

// setupPath sets up path p together with the other ranks: ok if it runs, else why not
// (note, for the log); err for a failure that is not a refusal.
func (v *views) setupPath(c *core.Comm, p gpuPath, scratch int) (ok bool, note string, err error) {
	e := v.e
	switch p {
	case pathSameGPU:
		g, err := samegpu.NewSameGPU(v.drv, v.ctx, c.Rank(), c.Size(), e.comm.Timeout(), func(rec []byte) ([]byte, error) {
			return hostAllGather(c, rec)
		})
		if errors.Is(err, cuda.ErrNotShared) {
			return false, fmt.Sprintf("the same-GPU path does not apply: %v", err), nil
		}
		if err != nil {
			return false, "", fmt.Errorf("setting up the same-GPU path: %w", err)
		}
		g.Watch(c.Err) // a dead, stopped or aborted rank ends every wait, not the timeout
		e.devSame = g
		return true, "", nil
	case pathDevice:
		sh, err := cuda.NewShared(v.drv, v.ctx, c.Rank(), c.Size(), scratch, func(rec []byte) ([]byte, error) {
			return hostAllGather(c, rec)
		}, cuda.RingFrom(e.devRingTo))
		if err != nil && sh != nil {
			sh.Abandon()
		}
		if errors.Is(err, cuda.ErrNotShared) {
			return false, fmt.Sprintf("the device path does not apply: %v", err), nil
		}
		if err != nil {
			return false, "", fmt.Errorf("setting up the device path: %w", err)
		}
		e.devShared = sh
		return true, "", nil
	}
	return false, "", nil
}

// mpsText is the INIT log's word on MPS where ranks share a GPU (why: how this rank
// found out whether it is a client, "" if it shares no GPU).
func mpsText(recs []autoRecord, t gpuTopo, why string) string {
	buses := make([]string, len(recs))
	for r, rec := range recs {
		buses[r] = rec.bus
	}
	var parts []string
	for _, g := range topology.SharedGPUs(buses) {
		if t.mps {
			parts = append(parts, fmt.Sprintf("MPS active on GPU %s (all %d ranks on it are clients)", g.Bus, len(g.Ranks)))
			continue
		}
		for _, r := range g.Ranks {
			if !recs[r].mps {
				parts = append(parts, fmt.Sprintf("rank %d is not a client of an MPS server on GPU %s, which %d ranks share: their contexts take turns on it, so a GPU-side wait between them costs a time slice", r, g.Bus, len(g.Ranks)))
				break
			}
		}
		break
	}
	s := strings.Join(parts, ", ")
	if t.mps {
		s += ": GPU-side waits allowed"
	}
	if why != "" {
		s += " (this rank: " + why + ")"
	}
	return s
}

// autoSummary is the INIT log's first line under auto: the paths set up and why.
func autoSummary(pc *pathChooser, mpsLine string, notes []string, sh *cuda.Shared, ringFrom int) string {
	var set []string
	for p := range numPaths {
		if pc.avail[p] {
			set = append(set, p.String())
		}
	}
	t := pc.topo
	where := "each rank on a GPU of its own"
	switch {
	case t.oneGPU:
		where = fmt.Sprintf("all %d ranks on one GPU", t.nranks)
	case t.shared:
		where = "ranks on several GPUs, some sharing one"
	}
	s := fmt.Sprintf("auto: paths set up: %s (%s", strings.Join(set, ", "), where)
	if mpsLine != "" {
		s += "; " + mpsLine
	}
	s += ")"
	if sh != nil {
		s += fmt.Sprintf("; device path: %d bytes of scratch on device %d, %s", sh.Cap(), sh.Device(), cuda.HardwareQueues())
		if ringFrom > 0 && t.nranks >= 3 {
			s += fmt.Sprintf(", all_reduce and reduce_scatter of %d bytes or more by the ring (GONCCL_DEVICE_RING_THRESHOLD)", ringFrom)
		}
	}
	for _, n := range notes {
		s += "; " + n
	}
	return s + "; each collective takes the path the cost model prices lowest for its size (GONCCL_DEVICE_PATH_COST changes its figures; GONCCL_DEVICE_PATH=1, samegpu or 0 forces a path)"
}

// autoChooses reports whether operations of kind k on bytes take path p under auto
// (true when the communicator does not choose by the model: another mode).
func (e *commEntry) autoChooses(p gpuPath, k core.Kind, bytes int) bool {
	e.devMu.Lock()
	pc := e.devChoice
	e.devMu.Unlock()
	return pc == nil || pc.path(k, bytes) == p
}
