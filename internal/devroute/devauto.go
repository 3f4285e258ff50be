package devroute

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/samegpu"
	"github.com/gonccl/gonccl/cuda/topology"
	"github.com/gonccl/gonccl/internal/route"
)

// GONCCL_DEVICE_PATH=auto (and =model): at a communicator's first operation on device
// buffers the ranks run package route's agreement step (route/agree.go): they agree on
// their GPUs, MPS and NVLink, and so on their setup (one rank, ranks sharing a GPU with
// or without MPS, one rank per GPU with or without NVLink). auto then sets up only the
// paths the GPU check has proven on that setup (route.Proven); model sets up every path
// possible there that the cost model chooses for some operation and size. After each
// path's setup the ranks agree again: a path any rank could not set up (a refusal or an
// error) is dropped by every rank together, and the INIT log names the rank and why.
// Staged is always there. Each collective then takes the available path the model
// prices lowest for its kind and size (route.Chooser).

// setupAuto is devicePath's decision under auto or model (devMu held, devDecided set):
// it sets up the paths the mode allows and the model may choose, and logs what it
// chose and why. detect says whether this rank is an MPS client on the GPU with the
// bus id it is given, nvlink whether that GPU has an active NVLink.
func (v *Views) setupAuto(c *core.Comm, scratch int, detect func(bus string) topology.MPSStatus, nvlink func(bus string) bool) error {
	e := v.e
	gather := route.HostGather(c)
	k, kerr := v.kernels()
	me := route.Record{Costs: e.devCosts.Hash()}
	bus, err := v.drv.BusID(v.dev)
	me.Bus = bus
	switch {
	case err != nil:
		me.Reason = err.Error()
	case kerr != nil:
		me.Reason = kerr.Error()
	default:
		me.OK = true
		me.NVLink = nvlink(bus)
	}
	recs, err := route.Exchange(gather, me)
	if err != nil {
		return err
	}
	if err := route.CheckCosts(recs); err != nil {
		e.devModeErr = err
		return err
	}
	for r, rec := range recs {
		if !rec.OK {
			logDevice(c, fmt.Sprintf("auto: staged path: rank %d cannot take a GPU path: %s", r, rec.Reason))
			return nil
		}
	}
	topo := route.AgreedTopo(recs, scratch)
	mpsLine := ""
	if topo.Shared() {
		sharing := 0
		for _, r := range recs {
			if r.Bus == me.Bus {
				sharing++
			}
		}
		why := ""
		if sharing > 1 {
			st := detect(me.Bus)
			me.MPS, why = st.Client, st.Why
		}
		if recs, err = route.Exchange(gather, me); err != nil {
			return err
		}
		topo = route.AgreedTopo(recs, scratch)
		mpsLine = route.MPSText(recs, topo, why)
	}
	setup := route.SetupOf(topo, route.AllNVLink(recs))
	e.devSetup, e.devSetupKnown = setup, true
	pc := route.NewChooser(e.devCosts, topo)
	// Set at once: a setup that fails below leaves the paths set up before it chosen by
	// the model, not taken for every operation.
	e.devChoice, e.devKernels, e.devCtx = pc, k, v.ctx
	allowed := func(p route.Path) bool {
		return e.devMode == devModel || route.IsProven(setup, route.RouteOf(p, false))
	}
	var notes []string
	refused := [route.NumPaths]bool{}
	candidate := func(p route.Path) bool {
		return allowed(p) && !refused[p] && !pc.Has(p) && (p != route.SameGPU || topo.OneGPU())
	}
	// Set up each candidate the model would choose somewhere, given every candidate
	// not yet refused; a refusal may make another useful, hence the second pass.
	for range 2 {
		for _, p := range []route.Path{route.SameGPU, route.Device} {
			if !candidate(p) {
				continue
			}
			var cand [route.NumPaths]bool
			for q := range route.NumPaths {
				cand[q] = candidate(q)
			}
			if !pc.Worth(p, cand) {
				continue
			}
			ok, note, err := v.setupPath(c, p, scratch, gather)
			if err != nil {
				return err
			}
			if note != "" {
				notes = append(notes, note)
			}
			pc.Set(p, ok)
			refused[p] = !ok
		}
	}
	if e.devShared != nil {
		// A peer lost, an operation on the GPU past the timeout, ranks that disagree:
		// the watcher releases this rank's streams and breaks the communicator, so
		// the next call (and the flight recorder) names the rank (cuda/devfault.go).
		e.devShared.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, Fail: c.FailDevice})
	}
	logDevice(c, autoSummary(pc, setup, e.devMode, e.pipelined(), mpsLine, notes, e.devShared, e.devRingTo))
	for _, l := range pc.Describe() {
		logDevice(c, "auto: "+l)
	}
	return nil
}

// setupPath sets up path p together with the other ranks, then agrees with them: ok if
// every rank could, else why not (note, for the log), and every rank drops the path.
// A rank's setup error counts as its refusal; err is a failure of the agreement itself.
func (v *Views) setupPath(c *core.Comm, p route.Path, scratch int, gather route.Gather) (ok bool, note string, err error) {
	e := v.e
	var undo func()
	var serr error
	switch p {
	case route.SameGPU:
		g, err := samegpu.NewSameGPU(v.drv, v.ctx, c.Rank(), c.Size(), e.comm.Timeout(), gather)
		if err == nil {
			g.Watch(c.Err) // a dead, stopped or aborted rank ends every wait, not the timeout
			e.devSame = g
			undo = func() { _ = g.Close(); e.devSame = nil }
		}
		serr = err
	case route.Device:
		sh, err := cuda.NewShared(v.drv, v.ctx, c.Rank(), c.Size(), scratch, gather)
		if err != nil && sh != nil {
			sh.Abandon()
		}
		if err == nil {
			e.devShared = sh
			undo = func() { sh.Abandon(); e.devShared = nil }
		}
		serr = err
	}
	if serr == nil && e.devSetupFault != nil {
		if serr = e.devSetupFault(p); serr != nil && undo != nil {
			undo()
			undo = nil
		}
	}
	why := ""
	if serr != nil {
		why = serr.Error()
		if !errors.Is(serr, cuda.ErrNotShared) {
			why = "setting it up failed: " + why
		}
	}
	all, who, err := route.Agree(gather, serr == nil, why)
	if err != nil {
		if undo != nil {
			undo()
		}
		return false, "", fmt.Errorf("agreeing on the %s path's setup: %w", p, err)
	}
	if !all {
		if undo != nil {
			undo()
		}
		return false, fmt.Sprintf("the %s path is not set up: %s", p, who), nil
	}
	return true, "", nil
}

// autoSummary is the INIT log's first line under auto: the setup, the paths set up,
// whether they are proven there and how to ask for the others.
func autoSummary(pc *route.Chooser, setup route.Setup, mode devMode, pipelined bool, mpsLine string, notes []string, sh *cuda.Shared, ringFrom int) string {
	var set []string
	for p := range route.NumPaths {
		if pc.Has(p) {
			set = append(set, p.String())
		}
	}
	t := pc.Topo()
	s := fmt.Sprintf("auto: paths set up: %s (%s", strings.Join(set, ", "), t.Where())
	if mpsLine != "" {
		s += "; " + mpsLine
	}
	s += ")"
	if sh != nil {
		s += fmt.Sprintf("; device path: %d bytes of scratch on device %d, %s", sh.Cap(), sh.Device(), cuda.HardwareQueues())
		if ringFrom > 0 && t.Ranks() >= 3 {
			s += fmt.Sprintf(", all_reduce and reduce_scatter of %d bytes or more by the ring (GONCCL_DEVICE_RING_THRESHOLD)", ringFrom)
		}
	}
	for _, n := range notes {
		s += "; " + n
	}
	if mode == devModel {
		return s + fmt.Sprintf("; GONCCL_DEVICE_PATH=model: the cost model chooses among every path set up, proven on hardware or not (setup %s); each collective takes the path it prices lowest for its size (GONCCL_DEVICE_PATH_COST changes its figures)", setup)
	}
	for p := range route.NumPaths {
		if pc.Has(p) && p != route.Staged {
			s += fmt.Sprintf("; %s", route.Verdict(setup, route.RouteOf(p, false)))
		}
	}
	return s + "; " + route.Verdict(setup, route.RouteOf(route.Staged, pipelined))
}

// autoChooses reports whether operations of kind k on bytes take path p under auto
// (true when the communicator does not choose by the model: another mode).
func (e *Comm) autoChooses(p route.Path, k core.Kind, bytes int) bool {
	e.devMu.Lock()
	pc := e.devChoice
	e.devMu.Unlock()
	return pc == nil || pc.Pick(k, bytes) == p
}
