package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// goNVML adapts go-nvml's Interface (here its mocks) to NVML, the way a build that
// linked go-nvml would: the topology code cannot tell the difference.
type goNVML struct{ lib nvml.Interface }

func nvmlErr(r nvml.Return) error {
	switch r {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND:
		return fmt.Errorf("nvml return %d: %w", int32(r), ErrNVMLNotSupported)
	case nvml.ERROR_INVALID_ARGUMENT:
		return fmt.Errorf("nvml return %d: %w", int32(r), ErrNVMLInvalidArgument)
	}
	return fmt.Errorf("nvml return %d", int32(r))
}

func (g goNVML) Init() error     { return nvmlErr(g.lib.Init()) }
func (g goNVML) Shutdown() error { return nvmlErr(g.lib.Shutdown()) }
func (g goNVML) DeviceCount() (int, error) {
	n, r := g.lib.DeviceGetCount()
	return n, nvmlErr(r)
}
func (g goNVML) Device(i int) (NVMLDevice, error) {
	d, r := g.lib.DeviceGetHandleByIndex(i)
	return goDevice{d}, nvmlErr(r)
}

type goDevice struct{ d nvml.Device }

func (g goDevice) Name() (string, error) { s, r := g.d.GetName(); return s, nvmlErr(r) }
func (g goDevice) UUID() (string, error) { s, r := g.d.GetUUID(); return s, nvmlErr(r) }
func (g goDevice) PCIBusID() (string, error) {
	p, r := g.d.GetPciInfo()
	return cString(p.BusId[:]), nvmlErr(r)
}
func (g goDevice) NUMANode() (int, error) { n, r := g.d.GetNumaNodeId(); return n, nvmlErr(r) }
func (g goDevice) NVLinkActive(link int) (bool, error) {
	s, r := g.d.GetNvLinkState(link)
	return s == nvml.FEATURE_ENABLED, nvmlErr(r)
}
func (g goDevice) NVLinkRemote(link int) (string, LinkPeer, error) {
	p, r := g.d.GetNvLinkRemotePciInfo(link)
	if err := nvmlErr(r); err != nil {
		return "", LinkPeerUnknown, err
	}
	k, r := g.d.GetNvLinkRemoteDeviceType(link)
	return cString(p.BusId[:]), LinkPeer(k), nvmlErr(r)
}

// MPSProcesses makes the adapter an NVMLMPSDevice, as the dlopen backend is.
func (g goDevice) MPSProcesses() ([]int, error) {
	ps, r := g.d.GetMPSComputeRunningProcesses()
	var pids []int
	for _, p := range ps {
		pids = append(pids, int(p.Pid))
	}
	return pids, nvmlErr(r)
}

func cString[T ~int8 | ~uint8](b []T) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func busBytes(id string) [32]uint8 {
	var b [32]uint8
	copy(b[:], id)
	return b
}

// link is one NVLink of a mock device: its state and remote end.
type link struct {
	active bool
	bus    string // as NVML spells it
	kind   nvml.IntNvLinkDeviceType
}

// wire gives a dgxa100 mock device a bus id (NVML's eight-digit domain), a NUMA node
// and NVLinks; a nil links slice means the device has no NVLink support.
func wire(d *dgxa100.Device, bus string, numa int, links []link) {
	d.PciBusID = bus
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		return nvml.PciInfo{BusId: busBytes(bus), PciDeviceId: 0x20B010DE}, nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return numa, nvml.SUCCESS }
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if links == nil {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if l < 0 || l >= len(links) {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		if links[l].active {
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		return nvml.FEATURE_DISABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
		if links == nil || l < 0 || l >= len(links) || !links[l].active {
			return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.PciInfo{BusId: busBytes(links[l].bus)}, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		if links == nil || l < 0 || l >= len(links) || !links[l].active {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return links[l].kind, nvml.SUCCESS
	}
}

// A DGX A100's GPUs: bus ids, NUMA nodes (two GPUs per node, as on the real machine).
var (
	dgxBus  = []string{"07", "0f", "47", "4e", "87", "90", "b7", "bd"}
	dgxNUMA = []int{3, 3, 1, 1, 7, 7, 5, 5}
	// Its six NVSwitches.
	dgxSwitchBus = []string{"c4", "c5", "c6", "c7", "c8", "c9"}
)

func nvmlBus(b string) string { return "00000000:" + strings.ToUpper(b) + ":00.0" }

// dgxA100 is go-nvml's whole-machine DGX A100 mock, wired as the real machine is:
// every GPU has 12 NVLinks, two to each of six NVSwitches; links 12-17 are inactive.
func dgxA100() *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		links := make([]link, MaxNVLinks)
		for l := range 12 {
			links[l] = link{active: true, bus: nvmlBus(dgxSwitchBus[l/2]), kind: nvml.NVLINK_DEVICE_TYPE_SWITCH}
		}
		wire(d.(*dgxa100.Device), nvmlBus(dgxBus[i]), dgxNUMA[i], links)
	}
	return s
}

// dgx1Links is a DGX-1 (V100) hybrid cube-mesh: direct GPU-to-GPU NVLinks, six per
// GPU, one or two to each of four peers (nvidia-smi topo -m's NV1/NV2).
var dgx1Links = [8][8]int{
	{0, 1, 1, 2, 2, 0, 0, 0},
	{1, 0, 2, 1, 0, 2, 0, 0},
	{1, 2, 0, 2, 0, 0, 1, 0},
	{2, 1, 2, 0, 0, 0, 0, 1},
	{2, 0, 0, 0, 0, 1, 1, 2},
	{0, 2, 0, 0, 1, 0, 2, 1},
	{0, 0, 1, 0, 1, 2, 0, 2},
	{0, 0, 0, 1, 2, 1, 2, 0},
}

// dgx1 is the DGX A100 mock rewired as a DGX-1: links in peer order, then two inactive
// links, then the end of the device's links.
func dgx1() *dgxa100.Server {
	s := dgxa100.New()
	for i, d := range s.Devices {
		var links []link
		for j, n := range dgx1Links[i] {
			for range n {
				links = append(links, link{active: true, bus: nvmlBus(dgxBus[j]), kind: nvml.NVLINK_DEVICE_TYPE_GPU})
			}
		}
		links = append(links, link{}, link{})
		wire(d.(*dgxa100.Device), nvmlBus(dgxBus[i]), i/4, links)
	}
	return s
}

func TestTopologyDGXA100NVSwitch(t *testing.T) {
	s := dgxA100()
	lib := goNVML{s}
	require.NoError(t, lib.Init())
	gpus, err := Topology(lib)
	require.NoError(t, err)
	require.Len(t, gpus, 8)
	for i, g := range gpus {
		assert.Equal(t, i, g.Index)
		assert.Equal(t, "Mock NVIDIA A100-SXM4-40GB", g.Name)
		assert.Equal(t, s.Devices[i].(*dgxa100.Device).UUID, g.UUID)
		assert.Equal(t, "0000:"+dgxBus[i]+":00.0", g.BusID, "GPU %d", i)
		assert.Equal(t, dgxNUMA[i], g.NUMANode, "GPU %d", i)
		assert.Equal(t, 12, g.NVLinks, "GPU %d", i)
		assert.Equal(t, 12, g.SwitchLinks, "GPU %d", i)
		assert.Empty(t, g.PeerLinks, "GPU %d: NVSwitch links are not direct links", i)
		var others []int
		for j := range 8 {
			if j != i {
				others = append(others, j)
			}
		}
		assert.Equal(t, others, g.Peers, "GPU %d: the NVSwitch fabric joins every GPU", i)
	}
	assert.Equal(t,
		"GPU 0 (cuda:0) Mock NVIDIA A100-SXM4-40GB bus 0000:07:00.0 NUMA 3 NVLink 12 links (12 via NVSwitch); peers 1,2,3,4,5,6,7",
		FormatGPU(gpus[0], 0))
	assert.Equal(t,
		"GPU 6 (cuda:6) Mock NVIDIA A100-SXM4-40GB bus 0000:b7:00.0 NUMA 5 NVLink 12 links (12 via NVSwitch); peers 0,1,2,3,4,5,7",
		FormatGPU(gpus[6], 6))
}

func TestTopologyDGX1HybridCubeMesh(t *testing.T) {
	gpus, err := Topology(goNVML{dgx1()})
	require.NoError(t, err)
	require.Len(t, gpus, 8)
	wantPeers := [8][]int{
		{1, 2, 3, 4}, {0, 2, 3, 5}, {0, 1, 3, 6}, {0, 1, 2, 7},
		{0, 5, 6, 7}, {1, 4, 6, 7}, {2, 4, 5, 7}, {3, 4, 5, 6},
	}
	for i, g := range gpus {
		assert.Equal(t, wantPeers[i], g.Peers, "GPU %d", i)
		assert.Equal(t, 6, g.NVLinks, "GPU %d: the inactive links are not counted", i)
		assert.Zero(t, g.SwitchLinks, "GPU %d", i)
		assert.Equal(t, i/4, g.NUMANode, "GPU %d", i)
		total := 0
		for j, n := range g.PeerLinks {
			assert.Equal(t, dgx1Links[i][j], n, "GPU %d -> %d", i, j)
			assert.Equal(t, n, gpus[j].PeerLinks[i], "links %d<->%d are counted the same from both ends", i, j)
			total += n
		}
		assert.Equal(t, 6, total, "GPU %d", i)
	}
	assert.Equal(t,
		"GPU 0 (cuda:0) Mock NVIDIA A100-SXM4-40GB bus 0000:07:00.0 NUMA 0 NVLink 6 links (direct to GPU 1(x1),2(x1),3(x2),4(x2)); peers 1,2,3,4",
		FormatGPU(gpus[0], 0))
	assert.Equal(t,
		"GPU 5 (cuda:1) Mock NVIDIA A100-SXM4-40GB bus 0000:90:00.0 NUMA 1 NVLink 6 links (direct to GPU 1(x2),4(x1),6(x2),7(x1)); peers 1,4,6,7",
		FormatGPU(gpus[5], 1))
}

func TestTopologyWithoutNVLinkOrNUMA(t *testing.T) {
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*dgxa100.Device)
		wire(dev, nvmlBus(dgxBus[i]), 0, nil)
		dev.GetNumaNodeIdFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	}
	gpus, err := Topology(goNVML{s})
	require.NoError(t, err)
	for i, g := range gpus {
		assert.Zero(t, g.NVLinks, "GPU %d", i)
		assert.Empty(t, g.Peers, "GPU %d", i)
		assert.Equal(t, -1, g.NUMANode, "GPU %d", i)
	}
	assert.Equal(t, "GPU 1 (cuda:0) Mock NVIDIA A100-SXM4-40GB bus 0000:0f:00.0 NUMA none NVLink none", FormatGPU(gpus[1], 0))
}

func TestTopologyReportsNVMLFailures(t *testing.T) {
	s := dgxA100()
	s.Devices[3].(*dgxa100.Device).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	_, err := Topology(goNVML{s})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "GPU 3: name")

	lines := Describe(goNVML{s}, "", false)
	require.Len(t, lines, 1)
	assert.True(t, strings.HasPrefix(lines[0], "no GPU topology: reading it with NVML failed: GPU 3: name"), lines[0])
}

func TestDescribeWithoutNVML(t *testing.T) {
	lib := &mock.Interface{
		InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND },
	}
	lines := Describe(goNVML{lib}, "", false)
	require.Len(t, lines, 1)
	assert.True(t, strings.HasPrefix(lines[0], "no GPU topology: NVML is not available"), lines[0])
	assert.Empty(t, lib.ShutdownCalls(), "NVML that did not initialise is not shut down")
}

func TestDescribeDGXA100(t *testing.T) {
	s := dgxA100()
	lines := Describe(goNVML{s}, "", false)
	require.Len(t, lines, 9)
	assert.Equal(t, "GPU topology (NVML): 8 GPU(s), 8 visible", lines[0])
	for i, line := range lines[1:] {
		assert.True(t, strings.HasPrefix(line, fmt.Sprintf("GPU %d (cuda:%d) Mock NVIDIA A100-SXM4-40GB bus 0000:%s:00.0 NUMA %d NVLink 12 links", i, i, dgxBus[i], dgxNUMA[i])), line)
	}
	assert.Len(t, s.InitCalls(), 1)
	assert.Len(t, s.ShutdownCalls(), 1, "Describe shuts NVML down again")

	uuid := s.Devices[5].(*dgxa100.Device).UUID
	lines = Describe(goNVML{s}, "6,"+uuid[:12], true)
	require.Len(t, lines, 3)
	assert.Equal(t, fmt.Sprintf("GPU topology (NVML): 8 GPU(s), 2 visible (CUDA_VISIBLE_DEVICES=%q)", "6,"+uuid[:12]), lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "GPU 6 (cuda:0) "), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "GPU 5 (cuda:1) "), lines[2])
}

func TestVisible(t *testing.T) {
	gpus := make([]GPU, 4)
	for i := range gpus {
		gpus[i] = GPU{Index: i, UUID: fmt.Sprintf("GPU-%d%d%d-abcd", i, i, i)}
	}
	indices := func(gs []GPU) []int {
		out := []int{}
		for _, g := range gs {
			out = append(out, g.Index)
		}
		return out
	}
	for _, tc := range []struct {
		spec string
		set  bool
		want []int
	}{
		{"", false, []int{0, 1, 2, 3}},
		{"", true, []int{}},
		{"2,0", true, []int{2, 0}},
		{" 3 , 1 ", true, []int{3, 1}},
		{"1,7,2", true, []int{1}},        // the list ends at the first bad entry
		{"1,1,2", true, []int{1}},        // and at a repeated one
		{"GPU-222,0", true, []int{2, 0}}, // UUID prefixes
		{"GPU-,1", true, []int{}},        // an ambiguous prefix is a bad entry
		{"-1,0", true, []int{}},          // so is a negative index
		{"GPU-333-abcd", true, []int{3}}, // a whole UUID
		{"MIG-1234", true, []int{}},      // MIG instances are not whole GPUs
		{"0,GPU-111-abcd,3", true, []int{0, 1, 3}},
	} {
		assert.Equal(t, tc.want, indices(Visible(gpus, tc.spec, tc.set)), "CUDA_VISIBLE_DEVICES=%q (set %v)", tc.spec, tc.set)
	}
}

// TestDynamicNVMLOnThisMachine runs the real dlopen backend. Without an NVIDIA driver
// (CI) it must say so in one line; with one, it must list the GPUs without failing.
func TestDynamicNVMLOnThisMachine(t *testing.T) {
	lines := Describe(newDynamicNVML(), "", false)
	require.NotEmpty(t, lines)
	if strings.HasPrefix(lines[0], "no GPU topology: NVML is not available") {
		require.Len(t, lines, 1)
		assert.Contains(t, lines[0], "libnvidia-ml.so.1")
		return
	}
	require.True(t, strings.HasPrefix(lines[0], "GPU topology (NVML): "), "NVML loaded, so the topology must be read: %v", lines)
	for _, line := range lines[1:] {
		assert.True(t, strings.HasPrefix(line, "GPU "), line)
	}
}

func TestTopologyLinesIsCachedAndCopied(t *testing.T) {
	a := TopologyLines()
	require.NotEmpty(t, a)
	a[0] = "changed"
	assert.NotEqual(t, "changed", TopologyLines()[0])
}
