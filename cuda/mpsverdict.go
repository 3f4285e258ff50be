package cuda

import (
	"fmt"
	"strings"
)

// mpsVerdict judges, from every rank's record, the ranks that share a GPU: "" and ok
// when every one of them is an MPS client (line then says so, for the INIT log), or
// the first that is not, for the refusal.
func mpsVerdict(recs []peerRecord) (line string, notClient int) {
	byBus := map[string][]int{}
	var buses []string
	for r, rec := range recs {
		if rec.bus == "" {
			continue
		}
		if byBus[rec.bus] == nil {
			buses = append(buses, rec.bus)
		}
		byBus[rec.bus] = append(byBus[rec.bus], r)
	}
	var parts []string
	for _, bus := range buses {
		ranks := byBus[bus]
		if len(ranks) < 2 {
			continue
		}
		for _, r := range ranks {
			if !recs[r].mps {
				return "", r
			}
		}
		parts = append(parts, fmt.Sprintf("GPU %s (all %d ranks on it are clients)", bus, len(ranks)))
	}
	return "MPS active on " + strings.Join(parts, ", ") + ": GPU-side waits allowed", -1
}
