// Package devroute routes the operations of the C ABI on device buffers (a stream
// given) to the path that runs them: the same-GPU path (cuda/samegpu), the device
// path (cuda's Shared), the staged path with its reductions on the GPU, or the staged
// path through pinned host memory (cuda/staged), pipelined by chunk or not. It holds
// each communicator's path state (Comm: the settings, read once at creation, the
// paths its first device operation set up, the pinned pool), and one Run per
// collective that checks the operation once (core.Comm.CheckOp), then takes the first
// path that applies in the order the route package's cost model prices them, among
// the paths the settings and route's proven table allow. Host buffers go to core at
// once. Package capi converts the C arguments and calls Run.
package devroute

import (
	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/internal/route"
)

// errUsage is the C ABI's invalid-usage error (goncclInvalidUsage).
var errUsage = route.ErrUsage

// noRoot is the root of the collectives that have none.
const noRoot = core.NoRoot
