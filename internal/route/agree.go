package route

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/topology"
)

// auto's agreement step. At a communicator's first operation on device buffers the
// ranks tell each other their GPU (by PCI bus id), whether they could load gonccl's
// kernels, whether their GPU has NVLink and which cost figures they hold (Exchange);
// where a GPU is shared, the ranks on it say whether they are MPS clients there, in a
// second round. From that every rank derives the same topology and setup (AgreedTopo,
// SetupOf). Then each rank sets up the paths auto may take there (the proven ones, or
// every one under GONCCL_DEVICE_PATH=model) and the ranks agree once more on each
// (Agree): a path that any rank could not set up is dropped by every rank together.

// Sizes of a rank's record in the exchange: ok, MPS client, NVLink, the cost figures'
// hash, its GPU's bus id and why it cannot take a GPU path.
const (
	busIDBytes  = 32
	reasonBytes = 96
	recordBytes = 1 + 1 + 1 + 8 + busIDBytes + reasonBytes
)

// Record is one rank's record in auto's setup exchange.
type Record struct {
	OK     bool // it read its GPU and loaded the kernels
	MPS    bool // an MPS client on its GPU (the second round only)
	NVLink bool // its GPU has an active NVLink
	Costs  uint64
	Bus    string
	Reason string // why not OK
}

func (r Record) encode() []byte {
	b := make([]byte, recordBytes)
	for i, on := range []bool{r.OK, r.MPS, r.NVLink} {
		if on {
			b[i] = 1
		}
	}
	binary.LittleEndian.PutUint64(b[3:], r.Costs)
	copy(b[11:11+busIDBytes], r.Bus)
	copy(b[11+busIDBytes:], r.Reason)
	return b
}

func decodeRecord(b []byte) Record {
	return Record{OK: b[0] == 1, MPS: b[1] == 1, NVLink: b[2] == 1, Costs: binary.LittleEndian.Uint64(b[3:]),
		Bus: nulTrimmed(b[11 : 11+busIDBytes]), Reason: nulTrimmed(b[11+busIDBytes:])}
}

func nulTrimmed(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Gather all-gathers each rank's rec (the same length on every rank) and returns the
// ranks' records one after another.
type Gather func(rec []byte) ([]byte, error)

// HostGather is Gather over c's host all-gather, waiting for it.
func HostGather(c *core.Comm) Gather {
	return func(rec []byte) ([]byte, error) {
		all := make([]byte, len(rec)*c.Size())
		req, err := c.AllGather(rec, all, len(rec), core.Uint8)
		if err == nil {
			_, err = req.Wait(-1)
		}
		return all, err
	}
}

// Exchange all-gathers me and decodes every rank's record.
func Exchange(g Gather, me Record) ([]Record, error) {
	all, err := g(me.encode())
	if err != nil {
		return nil, fmt.Errorf("auto's setup exchange: %w", err)
	}
	if len(all)%recordBytes != 0 {
		return nil, fmt.Errorf("auto's setup exchange: %d bytes, not whole records of %d", len(all), recordBytes)
	}
	recs := make([]Record, len(all)/recordBytes)
	for r := range recs {
		recs[r] = decodeRecord(all[r*recordBytes : (r+1)*recordBytes])
	}
	return recs, nil
}

// CheckCosts refuses ranks whose cost figures differ: they would choose differently.
func CheckCosts(recs []Record) error {
	for r, rec := range recs {
		if rec.Costs != recs[0].Costs {
			return fmt.Errorf("%w: GONCCL_DEVICE_PATH_COST differs between rank 0 and rank %d: it must be the same on every rank, so that they choose the same path for each operation", ErrUsage, r)
		}
	}
	return nil
}

// AgreedTopo derives the topology from every rank's record (the same on every rank).
func AgreedTopo(recs []Record, scratch int) Topo {
	t := Topo{nranks: len(recs), oneGPU: len(recs) > 1, scratch: scratch}
	byBus := map[string]int{}
	for _, r := range recs {
		byBus[r.Bus]++
		if r.Bus != recs[0].Bus {
			t.oneGPU = false
		}
	}
	t.mps = true
	for _, r := range recs {
		if byBus[r.Bus] > 1 {
			t.shared = true
			t.mps = t.mps && r.MPS
		}
	}
	return t
}

// AllNVLink reports whether every rank's GPU has an active NVLink.
func AllNVLink(recs []Record) bool {
	for _, r := range recs {
		if !r.NVLink {
			return false
		}
	}
	return len(recs) > 0
}

// Shared reports whether two ranks share a GPU.
func (t Topo) Shared() bool { return t.shared }

// OneGPU reports whether every rank is on one GPU (two ranks at least).
func (t Topo) OneGPU() bool { return t.oneGPU }

// Ranks is the number of ranks.
func (t Topo) Ranks() int { return t.nranks }

// Where describes the ranks' GPUs for the INIT log.
func (t Topo) Where() string {
	switch {
	case t.oneGPU:
		return fmt.Sprintf("all %d ranks on one GPU", t.nranks)
	case t.shared:
		return "ranks on several GPUs, some sharing one"
	}
	return "each rank on a GPU of its own"
}

// MPSText is the INIT log's word on MPS where ranks share a GPU (why: how this rank
// found out whether it is a client, "" if it shares no GPU).
func MPSText(recs []Record, t Topo, why string) string {
	buses := make([]string, len(recs))
	for r, rec := range recs {
		buses[r] = rec.Bus
	}
	var parts []string
	for _, g := range topology.SharedGPUs(buses) {
		if t.mps {
			parts = append(parts, fmt.Sprintf("MPS active on GPU %s (all %d ranks on it are clients)", g.Bus, len(g.Ranks)))
			continue
		}
		for _, r := range g.Ranks {
			if !recs[r].MPS {
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

// NewChooser is a chooser over topo with costs and only the staged path set up.
func NewChooser(costs Costs, topo Topo) *Chooser {
	pc := &Chooser{costs: costs, topo: topo}
	pc.avail[Staged] = true
	return pc
}

// Set marks path p set up (or not).
func (pc *Chooser) Set(p Path, ok bool) { pc.avail[p] = ok }

// Has reports whether path p is set up.
func (pc *Chooser) Has(p Path) bool { return pc.avail[p] }

// Topo is the topology the chooser prices for.
func (pc *Chooser) Topo() Topo { return pc.topo }

// Worth reports whether the model would choose path p for some operation and size if
// p and every path of cand (those set up, and those not yet tried) were set up.
func (pc *Chooser) Worth(p Path, cand [NumPaths]bool) bool {
	try := *pc
	for q := range NumPaths {
		try.avail[q] = pc.avail[q] || cand[q]
	}
	return try.Uses(p)
}

// Agree is the setup's agreement round: each rank says whether it could set up what
// the ranks set up together (why not, if it could not); it returns, the same on every
// rank, whether every rank could, and if not which rank could not and why (the first
// such rank). A failure of the round itself is an error.
func Agree(g Gather, ok bool, why string) (bool, string, error) {
	me := Record{OK: ok, Reason: why}
	recs, err := Exchange(g, me)
	if err != nil {
		return false, "", err
	}
	for r, rec := range recs {
		if !rec.OK {
			return false, fmt.Sprintf("rank %d could not: %s", r, rec.Reason), nil
		}
	}
	return true, "", nil
}
