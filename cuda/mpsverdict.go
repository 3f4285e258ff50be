package cuda

import (
	"fmt"
	"strings"

	"github.com/gonccl/gonccl/cuda/topology"
)

// mpsVerdict judges, from every rank's record, the ranks that share a GPU: "" and ok
// when every one of them is an MPS client (line then says so, for the INIT log), or
// the first that is not, for the refusal.
func mpsVerdict(recs []peerRecord) (line string, notClient int) {
	buses := make([]string, len(recs))
	for r, rec := range recs {
		buses[r] = rec.bus
	}
	var parts []string
	for _, g := range topology.SharedGPUs(buses) {
		for _, r := range g.Ranks {
			if !recs[r].mps {
				return "", r
			}
		}
		parts = append(parts, fmt.Sprintf("GPU %s (all %d ranks on it are clients)", g.Bus, len(g.Ranks)))
	}
	return "MPS active on " + strings.Join(parts, ", ") + ": GPU-side waits allowed", -1
}
