package devroute

import (
	"fmt"
	"strings"

	"github.com/gonccl/gonccl/internal/cenv"
	settings "github.com/gonccl/gonccl/internal/config"
)

// devRingBytes is the all_reduce size (a reduce_scatter's input) from which the device
// path runs its ring (cuda/devring.go) among three or more ranks, unless
// GONCCL_DEVICE_RING_THRESHOLD says otherwise: below it, every rank reading every
// peer's scratch at once costs fewer flag round trips than the ring's 2(N-1) steps.
const devRingBytes = 4 << 20

// devRingFrom is the threshold the settings ask for (0: never the ring).
func devRingFrom() (int, error) {
	v, ok := cenv.Lookup("GONCCL_DEVICE_RING_THRESHOLD")
	if !ok || strings.TrimSpace(v) == "" {
		return devRingBytes, nil
	}
	n, ok := settings.ParseBytes(v, maxDevScratch)
	if !ok {
		return 0, fmt.Errorf("%w: GONCCL_DEVICE_RING_THRESHOLD=%q: want bytes from 0 (never) to 16G (e.g. 4194304, 4M)", errUsage, v)
	}
	return int(n), nil
}
