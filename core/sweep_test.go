package core

import "testing"

// sweepRanks is how many ranks the collective sweeps go up to: 8, or 4 under -race
// -short (make test-race), where interleavings between ranks are what the detector
// looks at, 4 ranks exercise them as 8 do, and the sweeps would otherwise take most of
// ten minutes on 2 cores.
func sweepRanks() int {
	if raceEnabled && testing.Short() {
		return 4
	}
	return 8
}
