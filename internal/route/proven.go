package route

import (
	"fmt"
	"strings"
)

// Setup is how a communicator's ranks sit on their GPUs, as auto's agreement step
// finds it: what the GPU check proves a path on.
type Setup uint8

const (
	OneRank          Setup = iota // a communicator of one rank
	SharedGPU                     // ranks sharing a GPU, no MPS server (their contexts take turns)
	SharedGPUMPS                  // ranks sharing a GPU, every one a client of its MPS server
	GPUPerRank                    // one rank per GPU, no NVLink between them
	GPUPerRankNVLink              // one rank per GPU, joined by NVLink
	NumSetups
)

// String is the setup's name in the table, the INIT log and the GPU check's report.
func (s Setup) String() string {
	switch s {
	case OneRank:
		return "one-rank"
	case SharedGPU:
		return "shared-gpu"
	case SharedGPUMPS:
		return "shared-gpu-mps"
	case GPUPerRank:
		return "gpu-per-rank"
	case GPUPerRankNVLink:
		return "gpu-per-rank-nvlink"
	}
	return fmt.Sprintf("setup(%d)", uint8(s))
}

// Words describes the setup for a person.
func (s Setup) Words() string {
	switch s {
	case OneRank:
		return "one rank"
	case SharedGPU:
		return "ranks sharing a GPU without MPS"
	case SharedGPUMPS:
		return "ranks sharing a GPU under MPS"
	case GPUPerRank:
		return "one rank per GPU, no NVLink"
	case GPUPerRankNVLink:
		return "one rank per GPU, NVLink"
	}
	return s.String()
}

// SetupOf classifies an agreed topology (nvlink: every rank's GPU has an active NVLink).
func SetupOf(t Topo, nvlink bool) Setup {
	switch {
	case t.nranks <= 1:
		return OneRank
	case t.shared && t.mps:
		return SharedGPUMPS
	case t.shared:
		return SharedGPU
	case nvlink:
		return GPUPerRankNVLink
	}
	return GPUPerRank
}

// Route is a way an operation on device buffers can go, as the table proves it: the
// cost model's paths, with the staged path split by pipelining.
type Route uint8

const (
	RouteStaged    Route = iota // staged through pinned host memory, one copy each way per operation
	RoutePipelined              // staged, pipelined by chunk, reductions on the GPU
	RouteDevice                 // the device path, its ring included
	RouteSameGPU                // the same-GPU path (for one rank: a device-to-device copy)
	NumRoutes
)

func (r Route) String() string {
	switch r {
	case RouteStaged:
		return "staged"
	case RoutePipelined:
		return "staged-pipelined"
	case RouteDevice:
		return "device"
	case RouteSameGPU:
		return "same-GPU"
	}
	return fmt.Sprintf("route(%d)", uint8(r))
}

// OptIn is the setting that asks for the route by name.
func (r Route) OptIn() string {
	switch r {
	case RouteStaged:
		return "GONCCL_DEVICE_PATH=0"
	case RoutePipelined:
		return "GONCCL_STAGED_CHUNK=4M"
	case RouteDevice:
		return "GONCCL_DEVICE_PATH=1"
	case RouteSameGPU:
		return "GONCCL_DEVICE_PATH=samegpu"
	}
	return ""
}

// RouteOf is the route the cost model's path p stands for (pipelined: the staged
// path pipelines by chunk).
func RouteOf(p Path, pipelined bool) Route {
	switch p {
	case Device:
		return RouteDevice
	case SameGPU:
		return RouteSameGPU
	}
	if pipelined {
		return RoutePipelined
	}
	return RouteStaged
}

// Proof is a GPU check report in which a route passed on a setup.
type Proof struct {
	Report string // the report, relative to the repository's root
	Date   string // when it ran, as the report's "date:" line starts
	GPU    string // the GPU, as the report names it
	Driver string // the NVIDIA driver's version
	Torch  string // torch's version
	Commit string // the source it ran (the report or the README beside it names it)
	// Steps are the steps of the report's step table that ran the route on the setup
	// and passed (reports older than the paths table, which say "pass" per step); for a
	// newer report, empty: its "| setup | path | result |" table says "passed".
	Steps []string
	// Shows are lines the report holds that show the route taken (an INIT line).
	Shows []string
}

// Cite is the proof in a few words for the INIT log and the docs.
func (p *Proof) Cite() string {
	return fmt.Sprintf("GPU check %s on %s, driver %s, torch %s, source %s (%s)", p.Date, p.GPU, p.Driver, p.Torch, p.Commit, p.Report)
}

// The reports that prove cells of the table.
var (
	h100Run1 = Proof{Report: "bench/results/h100-2026-11-26-run1/gpu-check-report.md",
		Date: "2026-11-26", GPU: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", Torch: "2.11.0+cu130", Commit: "02dd7a2"}
	h100Run2 = Proof{Report: "bench/results/h100-2026-11-26/gpu-check-report.md",
		Date: "2026-11-26", GPU: "NVIDIA H100 80GB HBM3", Driver: "580.159.04", Torch: "2.11.0+cu130", Commit: "e18d63d"}
)

func proof(p Proof, steps []string, shows ...string) *Proof {
	p.Steps, p.Shows = steps, shows
	return &p
}

// Proven is the table: for each setup, the routes that have passed the GPU check on
// real hardware, each with its report. auto takes only these; every other route runs
// when asked for by name (Route.OptIn). A cell changes only in a commit that adds the
// report proving it (TestProvenCellsCiteReports holds the table to the reports).
var Proven = [NumSetups][NumRoutes]*Proof{
	// The lecture's DDP scripts on one rank (run 1 predates the pipelined staged path
	// and the device path: staged was all there was).
	OneRank: {RouteStaged: proof(h100Run1, []string{"ddp-simple-per-gpu", "ddp-example-per-gpu"},
		"| ddp-simple-per-gpu | pass | 15 | 1 ranks printed reduced dy/dw: 0.0 |")},
	// Two and three ranks on one H100: the C ABI test, the stream checks and the DDP
	// scripts, unpipelined (e18d63d had no GONCCL_STAGED_CHUNK).
	SharedGPU: {RouteStaged: proof(h100Run2, []string{"capi-cuda-2ranks", "capi-cuda-3ranks", "stream-cuda",
		"ddp-simple-shared-gpu0", "ddp-example-shared-gpu0"},
		"GONCCL.INIT rank 0/2: staged path: GONCCL_DEVICE_PATH is not 1 (device buffers go through pinned host memory)")},
}

// IsProven reports whether route r has passed the GPU check on setup s.
func IsProven(s Setup, r Route) bool { return s < NumSetups && r < NumRoutes && Proven[s][r] != nil }

// Unproven lists the routes setup s may take only by name, with their settings.
func Unproven(s Setup) []Route {
	var out []Route
	for r := range NumRoutes {
		if !IsProven(s, r) {
			out = append(out, r)
		}
	}
	return out
}

// Verdict is the INIT log's word on route r under setup s: proven (with its report),
// or not, and how to ask for the routes auto does not take.
func Verdict(s Setup, r Route) string {
	var v string
	if p := Proven[s][r]; p != nil {
		v = fmt.Sprintf("%s path for %s, proven on hardware (%s)", r, s.Words(), p.Cite())
	} else {
		v = fmt.Sprintf("%s path for %s, not yet proven on hardware for this setup (the fallback: no path has passed the GPU check here)", r, s.Words())
	}
	var opt []string
	for _, u := range Unproven(s) {
		if u != r {
			opt = append(opt, fmt.Sprintf("%s: %s", u, u.OptIn()))
		}
	}
	if len(opt) > 0 {
		v += "; unproven paths run only by name ("
		for i, o := range opt {
			if i > 0 {
				v += ", "
			}
			v += o
		}
		v += "; GONCCL_DEVICE_PATH=model lets the cost model choose among all of them)"
	}
	return v
}

// StagedOnly reports whether the table proves nothing but unpipelined staging on every
// setup of several ranks. auto then stages whatever the ranks' setup is, so it needs
// neither to find the setup (no agreement step, no NVML, no kernel module) nor to set up
// a path it could not choose.
func StagedOnly() bool {
	for s := range NumSetups {
		if s == OneRank {
			continue
		}
		for r := range NumRoutes {
			if r != RouteStaged && IsProven(s, r) {
				return false
			}
		}
	}
	return true
}

// StagedOnlyVerdict is the INIT log's word under auto where StagedOnly holds: the staged
// path, the setups the GPU check has proven it on (with their reports), and how to ask
// for the routes auto does not take.
func StagedOnlyVerdict() string {
	var on []string
	for s := range NumSetups {
		if p := Proven[s][RouteStaged]; s != OneRank && p != nil {
			on = append(on, fmt.Sprintf("for %s (%s)", s.Words(), p.Cite()))
		}
	}
	v := "staged path, unpipelined, whatever the ranks' setup: the only path the GPU check has proven for several ranks"
	if len(on) > 0 {
		v += ", proven on hardware " + strings.Join(on, "; ") + ", the fallback elsewhere"
	}
	v += "; no GPU path is set up (no kernel module, no NVML, no agreement between the ranks)"
	var opt []string
	for r := range NumRoutes {
		if r != RouteStaged {
			opt = append(opt, fmt.Sprintf("%s: %s", r, r.OptIn()))
		}
	}
	return v + "; unproven paths run only by name (" + strings.Join(opt, ", ") + "; GONCCL_DEVICE_PATH=model lets the cost model choose among all of them)"
}
