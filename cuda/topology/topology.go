package topology

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/cenv"
)

// GPU topology for the INIT log, read with NVML: each GPU's name, PCI bus id, NUMA node
// and NVLink peers, in the spirit of NCCL's topology INFO lines.
//
// libgonccl.so must load on machines without a GPU and with RTLD_NOW (ctypes, a C
// program linked with -lgonccl). go-nvml's bindings leave their nvml* symbols undefined
// in the library, which breaks both, so the library reads NVML through the small dlopen
// backend in nvml.go, behind the NVML interface below; the tests drive the same code
// with go-nvml's mocks (a whole DGX A100 included) through an adapter.

// NVML is the part of the NVML library the topology reads.
type NVML interface {
	// Init loads and initialises NVML; an error means no NVML (no driver).
	Init() error
	Shutdown() error
	DeviceCount() (int, error)
	Device(index int) (NVMLDevice, error)
}

// NVMLDevice is the part of an NVML device handle the topology reads. Methods return
// an error wrapping ErrNVMLNotSupported where NVML has no answer (an old driver, a GPU
// without NVLink), and ErrNVMLInvalidArgument for a link number past the device's last.
type NVMLDevice interface {
	Name() (string, error)
	UUID() (string, error)
	// PCIBusID returns the bus id as NVML spells it (any domain width, any case).
	PCIBusID() (string, error)
	// NUMANode returns the NUMA node closest to the device, -1 if there is none.
	NUMANode() (int, error)
	NVLinkActive(link int) (bool, error)
	// NVLinkRemote returns the PCI bus id and kind of what link connects to.
	NVLinkRemote(link int) (string, LinkPeer, error)
}

// LinkPeer is what an NVLink connects a GPU to.
type LinkPeer int

// The kinds of LinkPeer, numbered like NVML's nvmlIntNvLinkDeviceType_t.
const (
	LinkPeerGPU     LinkPeer = 0
	LinkPeerIBMNPU  LinkPeer = 1
	LinkPeerSwitch  LinkPeer = 2
	LinkPeerUnknown LinkPeer = 0xff
)

// MaxNVLinks is NVML_NVLINK_MAX_LINKS: link numbers run from 0 to MaxNVLinks-1.
const MaxNVLinks = 18

var (
	// ErrNVMLNotSupported: NVML cannot answer this on this device or driver.
	ErrNVMLNotSupported = errors.New("not supported by NVML on this device")
	// ErrNVMLInvalidArgument: NVML refused the argument (a link past the last one).
	ErrNVMLInvalidArgument = errors.New("invalid argument to NVML")
)

// GPU is one GPU as the topology sees it.
type GPU struct {
	Index    int    // NVML index (all GPUs of the machine, whatever CUDA_VISIBLE_DEVICES says)
	Name     string // "NVIDIA A100-SXM4-40GB"
	UUID     string // "GPU-..."
	BusID    string // PCI bus id, normalised: "0000:07:00.0"
	NUMANode int    // -1: unknown or none
	NVLinks  int    // active NVLinks
	// Peers are the GPUs (NVML indices, ascending) reachable over NVLink, directly or
	// through an NVSwitch.
	Peers []int
	// PeerLinks counts the direct GPU-to-GPU links per peer (NVSwitch links not included).
	PeerLinks map[int]int
	// SwitchLinks counts the active links that go to an NVSwitch.
	SwitchLinks int
}

// remoteLink is one active NVLink of a GPU: the bus id and kind at its other end.
type remoteLink struct {
	busID string
	kind  LinkPeer
}

// Topology reads every GPU NVML sees and resolves the NVLink peers: a link whose other
// end is a GPU's bus id makes that GPU a direct peer; GPUs with links to NVSwitches are
// all peers of each other (the switch fabric connects every GPU attached to it).
// lib must be initialised (Init) and is not shut down here.
func Topology(lib NVML) ([]GPU, error) {
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("counting GPUs: %w", err)
	}
	gpus := make([]GPU, n)
	links := make([][]remoteLink, n)
	byBus := map[string]int{}
	for i := range n {
		dev, err := lib.Device(i)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		g := GPU{Index: i, NUMANode: -1, PeerLinks: map[int]int{}}
		if g.Name, err = dev.Name(); err != nil {
			return nil, fmt.Errorf("GPU %d: name: %w", i, err)
		}
		if g.UUID, err = dev.UUID(); err != nil && !errors.Is(err, ErrNVMLNotSupported) {
			return nil, fmt.Errorf("GPU %d: uuid: %w", i, err)
		}
		bus, err := dev.PCIBusID()
		if err != nil {
			return nil, fmt.Errorf("GPU %d: PCI bus id: %w", i, err)
		}
		g.BusID = driver.NormalizeBusID(bus)
		if node, err := dev.NUMANode(); err == nil {
			g.NUMANode = node
		} else if !errors.Is(err, ErrNVMLNotSupported) {
			return nil, fmt.Errorf("GPU %d: NUMA node: %w", i, err)
		}
		if links[i], err = readLinks(dev); err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
		g.NVLinks = len(links[i])
		byBus[g.BusID] = i
		gpus[i] = g
	}
	for i := range gpus {
		for _, l := range links[i] {
			j, isGPU := byBus[l.busID]
			switch {
			case l.kind == LinkPeerSwitch:
				gpus[i].SwitchLinks++
			case isGPU && j != i && (l.kind == LinkPeerGPU || l.kind == LinkPeerUnknown):
				gpus[i].PeerLinks[j]++
			}
		}
	}
	for i := range gpus {
		peers := map[int]bool{}
		for j := range gpus[i].PeerLinks {
			peers[j] = true
		}
		if gpus[i].SwitchLinks > 0 {
			for j := range gpus {
				if j != i && gpus[j].SwitchLinks > 0 {
					peers[j] = true
				}
			}
		}
		for j := range peers {
			gpus[i].Peers = append(gpus[i].Peers, j)
		}
		slices.Sort(gpus[i].Peers)
	}
	return gpus, nil
}

// readLinks returns a device's active NVLinks. A device without NVLink support has
// none; the links end at the first link number NVML refuses.
func readLinks(dev NVMLDevice) ([]remoteLink, error) {
	var out []remoteLink
	for link := range MaxNVLinks {
		active, err := dev.NVLinkActive(link)
		if errors.Is(err, ErrNVMLNotSupported) || errors.Is(err, ErrNVMLInvalidArgument) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("NVLink %d state: %w", link, err)
		}
		if !active {
			continue
		}
		bus, kind, err := dev.NVLinkRemote(link)
		if err != nil {
			return nil, fmt.Errorf("NVLink %d remote end: %w", link, err)
		}
		out = append(out, remoteLink{busID: driver.NormalizeBusID(bus), kind: kind})
	}
	return out, nil
}

// Visible returns the GPUs that CUDA_VISIBLE_DEVICES (value spec, set or not) leaves
// visible, in CUDA's order (cuda:0 first), with CUDA's rules: a list of NVML indices or
// UUIDs (a unique prefix is enough, "GPU-" included); the list ends at the first entry
// that names no GPU; an empty value hides every GPU. Unset: all of them.
func Visible(gpus []GPU, spec string, set bool) []GPU {
	if !set {
		return gpus
	}
	var out []GPU
	seen := map[int]bool{}
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		i := -1
		if n, err := strconv.Atoi(entry); err == nil {
			if n >= 0 && n < len(gpus) {
				i = n
			}
		} else if strings.HasPrefix(entry, "GPU-") {
			for k, g := range gpus {
				if strings.HasPrefix(g.UUID, entry) {
					if i >= 0 {
						i = -1 // ambiguous prefix
						break
					}
					i = k
				}
			}
		}
		if i < 0 || seen[i] {
			break
		}
		seen[i] = true
		out = append(out, gpus[i])
	}
	return out
}

// FormatGPU is the INFO line of one GPU; cudaIndex is its index among the visible
// GPUs (cuda:N).
func FormatGPU(g GPU, cudaIndex int) string {
	numa := "none"
	if g.NUMANode >= 0 {
		numa = strconv.Itoa(g.NUMANode)
	}
	return fmt.Sprintf("GPU %d (cuda:%d) %s bus %s NUMA %s NVLink %s",
		g.Index, cudaIndex, g.Name, g.BusID, numa, formatLinks(g))
}

func formatLinks(g GPU) string {
	if g.NVLinks == 0 {
		return "none"
	}
	var parts []string
	direct := make([]int, 0, len(g.PeerLinks))
	for j := range g.PeerLinks {
		direct = append(direct, j)
	}
	slices.Sort(direct)
	if len(direct) > 0 {
		var ps []string
		for _, j := range direct {
			ps = append(ps, fmt.Sprintf("%d(x%d)", j, g.PeerLinks[j]))
		}
		parts = append(parts, "direct to GPU "+strings.Join(ps, ","))
	}
	if g.SwitchLinks > 0 {
		parts = append(parts, fmt.Sprintf("%d via NVSwitch", g.SwitchLinks))
	}
	peers := make([]string, len(g.Peers))
	for k, j := range g.Peers {
		peers[k] = strconv.Itoa(j)
	}
	peerList := "none"
	if len(peers) > 0 {
		peerList = strings.Join(peers, ",")
	}
	return fmt.Sprintf("%d links (%s); peers %s", g.NVLinks, strings.Join(parts, "; "), peerList)
}

// Describe returns the INFO lines describing the GPUs visible to this process: one
// summary line, then one line per GPU (FormatGPU). No NVML, or no GPU, is one line
// saying so: never an error, since most machines running gonccl have no GPU.
func Describe(lib NVML, visibleSpec string, visibleSet bool) []string {
	if err := lib.Init(); err != nil {
		return []string{fmt.Sprintf("no GPU topology: NVML is not available (%v)", err)}
	}
	defer func() { _ = lib.Shutdown() }()
	gpus, err := Topology(lib)
	if err != nil {
		return []string{fmt.Sprintf("no GPU topology: reading it with NVML failed: %v", err)}
	}
	visible := Visible(gpus, visibleSpec, visibleSet)
	summary := fmt.Sprintf("GPU topology (NVML): %d GPU(s), %d visible", len(gpus), len(visible))
	if visibleSet {
		summary += fmt.Sprintf(" (CUDA_VISIBLE_DEVICES=%q)", visibleSpec)
	}
	lines := []string{summary}
	for k, g := range visible {
		lines = append(lines, FormatGPU(g, k))
	}
	return lines
}

var (
	topologyOnce  sync.Once
	topologyLines []string
)

// TopologyLines returns Describe's lines for this machine, read with the dlopen NVML
// backend once per process (the GPUs do not change while it runs). This is what each
// rank logs at INIT.
func TopologyLines() []string {
	topologyOnce.Do(func() {
		spec, set := cenv.Lookup("CUDA_VISIBLE_DEVICES")
		topologyLines = Describe(newDynamicNVML(), spec, set)
	})
	return slices.Clone(topologyLines)
}
