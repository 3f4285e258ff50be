package driver

import "sync/atomic"

// testFault names a step a package gets wrong on purpose, for the tests that show a wrong
// step is caught (the device path's "skip-ready-wait", "offset", "p2p-..."; staging's
// "chunk-offset"; the same-GPU path's "samegpu-..."; windows' "window-...").
var testFault atomic.Value

// SetTestFault makes every package of this process commit fault ("" for none). For tests
// only.
func SetTestFault(fault string) { testFault.Store(fault) }

// TestFault reports whether the tests asked for fault name.
func TestFault(name string) bool {
	f, _ := testFault.Load().(string)
	return f == name
}
