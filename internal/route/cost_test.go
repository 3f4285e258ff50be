package route

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
)

// chooser is a Chooser over topo with GONCCL_DEVICE_PATH_COST=cost and the given
// paths set up (staged always).
func chooser(t *testing.T, topo Topo, cost string, paths ...Path) *Chooser {
	t.Helper()
	c, err := ParseCosts(cost)
	require.NoError(t, err)
	pc := &Chooser{costs: c, topo: topo}
	pc.avail[Staged] = true
	for _, p := range paths {
		pc.avail[p] = true
	}
	return pc
}

var (
	ownGPUs   = Topo{nranks: 2, scratch: 8 << 20}
	oneGPU    = Topo{nranks: 2, oneGPU: true, shared: true, scratch: 8 << 20}
	oneGPUMPS = Topo{nranks: 2, oneGPU: true, shared: true, mps: true, scratch: 8 << 20}
	someShare = Topo{nranks: 3, shared: true, scratch: 8 << 20}
)

// modelSizes are the sizes the tests look at: 0, every power of two to 4 GiB and a few
// between.
func modelSizes() []int {
	out := []int{0, 3, 1000, 100_000, 3 << 20, 100 << 20}
	for b := 1; b <= 4<<30; b *= 2 {
		out = append(out, b)
	}
	return out
}

// crossover is the first size (bytes, to the byte) at which kind k leaves path from.
func crossover(t *testing.T, pc *Chooser, k core.Kind, from Path) int {
	t.Helper()
	ss := pc.spans(k)
	require.GreaterOrEqual(t, len(ss), 2, "%s: no crossover: %v", k, ss)
	require.Equal(t, from, ss[0].path, "%s: %v", k, ss)
	return ss[1].lo
}

// TestGPUCostDefaults: the built-in figures choose what the measurements say. Ranks
// on GPUs of their own: the device path at every size. Ranks on one GPU without MPS:
// the same-GPU path for its four collectives, staged for the rest, never the device
// path (its waits time-slice: the DDP step took 3x longer on it than staged), which is
// then not even worth setting up; the same with some ranks sharing a GPU. Under MPS:
// the device path for small messages (no host round trip), the same-GPU path for
// large ones (one pass over memory), crossing over at a few MiB.
func TestGPUCostDefaults(t *testing.T) {
	pc := chooser(t, ownGPUs, "", Device)
	for _, k := range ChosenKinds {
		require.Equal(t, []span{{Device, 0, maxModelBytes}}, pc.spans(k), k)
	}

	pc = chooser(t, oneGPU, "", Device, SameGPU)
	for _, k := range ChosenKinds {
		want := Staged
		if sameGPUKinds[k] {
			want = SameGPU
		}
		require.Equal(t, []span{{want, 0, maxModelBytes}}, pc.spans(k), k)
	}
	require.False(t, pc.Uses(Device), "the device path chosen somewhere on a time-sliced GPU")

	pc = chooser(t, someShare, "", Device)
	require.False(t, pc.Uses(Device), "the device path chosen somewhere with ranks time-slicing a GPU")

	pc = chooser(t, oneGPUMPS, "", Device, SameGPU)
	x := crossover(t, pc, core.KindAllReduce, Device)
	require.Greater(t, x, 1<<20)
	require.Less(t, x, 8<<20)
	require.Equal(t, SameGPU, pc.Pick(core.KindAllReduce, 256<<20))
	require.Equal(t, Device, pc.Pick(core.KindReduce, 256<<20), "under MPS the device path beats staging")
}

// TestGPUCostCrossoversMove: each figure moves the crossover the way it should. Under
// MPS on one GPU (device path small, same-GPU large): a slower same-GPU latency moves
// the crossover up, a faster same-GPU bandwidth moves it down, a slower device latency
// down. On GPUs of their own with a cheap staged latency (staged small, device large):
// a cheaper staged latency moves it up, a faster staged bandwidth up, a faster device
// bandwidth down.
func TestGPUCostCrossoversMove(t *testing.T) {
	mps := func(cost string) int {
		return crossover(t, chooser(t, oneGPUMPS, cost, Device, SameGPU), core.KindAllReduce, Device)
	}
	base := mps("")
	require.Greater(t, mps("samegpu.latency=40"), base)
	require.Less(t, mps("samegpu.busbw=1200"), base)
	require.Less(t, mps("device.latency=22"), base)

	own := func(cost string) int {
		return crossover(t, chooser(t, ownGPUs, cost, Device), core.KindAllReduce, Staged)
	}
	base = own("staged.latency=5")
	require.Greater(t, own("staged.latency=1"), base)
	require.Greater(t, own("staged.latency=5,staged.busbw=10"), base)
	require.Less(t, own("staged.latency=5,device.busbw=1000"), base)
	require.Less(t, own("staged.latency=5,device.latency=10"), base)

	// The spans are exact: the byte before the crossover takes the first path.
	pc := chooser(t, ownGPUs, "staged.latency=5", Device)
	require.Equal(t, Staged, pc.Pick(core.KindAllReduce, base-1))
	require.Equal(t, Device, pc.Pick(core.KindAllReduce, base))
}

// TestGPUChoiceSameOnEveryRank: ranks that read the same settings and got the same
// setup exchange choose the same path for every operation, each building its chooser
// on its own; settings that differ change the hash the exchange compares, so ranks
// that would choose differently are refused instead.
func TestGPUChoiceSameOnEveryRank(t *testing.T) {
	const cost = "staged.latency=30, samegpu.busbw=100"
	recs := []Record{{OK: true, Bus: "0000:10:00.0"}, {OK: true, Bus: "0000:10:00.0"}, {OK: true, Bus: "0000:10:00.0"}}
	var choosers []*Chooser
	for range recs {
		c, err := ParseCosts(cost)
		require.NoError(t, err)
		pc := &Chooser{costs: c, topo: AgreedTopo(recs, 8<<20)}
		pc.avail[Staged], pc.avail[SameGPU] = true, true
		choosers = append(choosers, pc)
	}
	require.True(t, choosers[0].topo.oneGPU && choosers[0].topo.shared && !choosers[0].topo.mps, choosers[0].topo)
	for _, k := range ChosenKinds {
		for _, b := range modelSizes() {
			p := choosers[0].Pick(k, b)
			for r, pc := range choosers[1:] {
				require.Equal(t, p, pc.Pick(k, b), "rank %d, %s of %d bytes", r+1, k, b)
			}
		}
	}
	require.Equal(t, choosers[0].Describe(), choosers[2].Describe())
	// Both paths are taken somewhere, so the test shows agreement on a real choice.
	require.True(t, choosers[0].Uses(Staged) && choosers[0].Uses(SameGPU), choosers[0].Describe())

	a, err := ParseCosts(cost)
	require.NoError(t, err)
	b, err := ParseCosts(cost + ",staged.latency=31")
	require.NoError(t, err)
	require.NotEqual(t, a.Hash(), b.Hash())
	same, err := ParseCosts(" samegpu.busbw=100 ,staged.latency=30")
	require.NoError(t, err)
	require.Equal(t, a.Hash(), same.Hash())
}

// TestGPUChoiceOnlyPathsSetUp: a path that is not set up (it was refused, or does not
// apply) is never chosen, however cheap the model makes it; the same-GPU path never
// takes the operations it does not have.
func TestGPUChoiceOnlyPathsSetUp(t *testing.T) {
	cheap := "device.latency=0,device.busbw=100000,samegpu.latency=0,samegpu.busbw=100000"
	for _, tc := range []struct {
		topo  Topo
		paths []Path
	}{
		{ownGPUs, nil},
		{oneGPUMPS, []Path{SameGPU}},
		{oneGPUMPS, []Path{Device}},
		{oneGPU, nil},
	} {
		pc := chooser(t, tc.topo, cheap, tc.paths...)
		for _, k := range ChosenKinds {
			for _, b := range modelSizes() {
				p := pc.Pick(k, b)
				require.True(t, pc.avail[p], "%s of %d bytes chose %s, which is not set up", k, b, p)
				if p == SameGPU {
					require.True(t, sameGPUKinds[k], "%s on the same-GPU path", k)
				}
			}
		}
		for p := range NumPaths {
			if !pc.avail[p] {
				require.False(t, pc.Uses(p), p)
			}
		}
	}
	// With both set up, the cheap figures take them.
	pc := chooser(t, oneGPUMPS, cheap, Device, SameGPU)
	require.Equal(t, Device, pc.Pick(core.KindAllReduce, 16)) // ties go to the device path, the lower
	require.Equal(t, Device, pc.Pick(core.KindGather, 16))
}

// TestGPUCostSetting: GONCCL_DEVICE_PATH_COST's syntax, and its refusals naming the
// keys.
func TestGPUCostSetting(t *testing.T) {
	c, err := ParseCosts(" STAGED.latency = 12.5 ,device.busbw=3e2,")
	require.NoError(t, err)
	require.Equal(t, 12.5, c.stagedLatency)
	require.Equal(t, 300.0, c.deviceBusbw)
	require.Equal(t, DefaultCosts().sameGPUBusbw, c.sameGPUBusbw)
	for _, bad := range []string{"staged.latency", "nope=1", "staged.latency=-1", "staged.busbw=0", "device.round=x", "samegpu.busbw=inf"} {
		_, err := ParseCosts(bad)
		require.ErrorIs(t, err, ErrUsage, bad)
		require.ErrorContains(t, err, "GONCCL_DEVICE_PATH_COST", bad)
	}
	_, err = ParseCosts("nope=1")
	require.ErrorContains(t, err, costKeys())
}

// TestGPUChoiceLog: the INIT log's lines say which path each size range takes and the
// model's times behind it.
func TestGPUChoiceLog(t *testing.T) {
	pc := chooser(t, oneGPUMPS, "", Device, SameGPU)
	lines := pc.Describe()
	require.NotEmpty(t, lines)
	x := crossover(t, pc, core.KindAllReduce, Device)
	first := lines[0]
	require.True(t, strings.HasPrefix(first, "all_reduce"), first)
	require.Contains(t, first, "<= "+sizeText(x-1)+" device (model at 16 B: 20 us vs staged 899 us, same-GPU 25 us)")
	require.Contains(t, first, "> "+sizeText(x-1)+" same-GPU (model at 256 MiB: ")
	pc = chooser(t, oneGPU, "", SameGPU)
	require.Contains(t, pc.Describe(), "all_reduce, all_gather, reduce_scatter, broadcast: at every size same-GPU (model at 16 B: 25 us vs staged 899 us)")
	require.Equal(t, "2.1 MiB", sizeText(2_200_000))
	require.Equal(t, "64 KiB", sizeText(64<<10))
	require.Equal(t, "4.5 ms", timeText(4496))
}

// TestGPUCostDoc: docs/gpu.md lists every figure with its default.
func TestGPUCostDoc(t *testing.T) {
	doc, err := os.ReadFile("../../docs/gpu.md")
	require.NoError(t, err)
	for _, p := range CostParams {
		row := "| `" + p.key + "` | " + strconv.FormatFloat(p.def, 'f', -1, 64) + " " + p.unit + " |"
		require.Contains(t, string(doc), row, "docs/gpu.md's table of the cost model's figures")
	}
}

// TestDeviceRing: the ring from the threshold up, among three or more ranks only, and
// never with the threshold 0.
func TestDeviceRing(t *testing.T) {
	for _, c := range []struct {
		ranks, bytes, from int
		want               bool
	}{
		{3, 4 << 20, 4 << 20, true}, {8, 64 << 20, 4 << 20, true}, {3, 4<<20 - 1, 4 << 20, false},
		{2, 64 << 20, 4 << 20, false}, {1, 64 << 20, 1, false}, {4, 64 << 20, 0, false}, {4, 0, 1, false},
	} {
		require.Equal(t, c.want, DeviceRing(c.ranks, c.bytes, c.from), "%+v", c)
	}
}
