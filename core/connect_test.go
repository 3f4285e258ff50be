package core

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ConnectAll makes every link that init defers, on every rank at once or on one.
func TestConnectAllMakesTheDeferredLinks(t *testing.T) {
	const n = 9
	comms := initComms(t, n, "", 20*time.Second)
	require.Less(t, len(comms[0].Connected()), n-1, "init connected every peer: nothing deferred to test")
	require.NoError(t, comms[0].ConnectAll()) // alone: the peers connect back on their own
	require.Len(t, comms[0].Connected(), n-1)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for r, c := range comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = c.ConnectAll() }()
	}
	wg.Wait()
	for r, c := range comms {
		require.NoError(t, errs[r])
		require.Len(t, c.Connected(), n-1, "rank %d", r)
	}
}
