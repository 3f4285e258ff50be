package cuda_test

import (
	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
)

// reductionCases are the reducing collectives of the script for dt.
func reductionCases(dt core.DataType, nranks int, counts []int) []devCase {
	ops := []core.RedOp{core.Sum, core.Prod, core.Min, core.Max, core.Avg}
	var cs []devCase
	for k, op := range ops {
		for _, n := range counts {
			cs = append(cs, devCase{coll: "all_reduce", dt: dt, op: op, count: n})
			cs = append(cs, devCase{coll: "reduce_scatter", dt: dt, op: op, count: n})
		}
		cs = append(cs, devCase{coll: "reduce", dt: dt, op: op, count: 1000, root: k % nranks})
		cs = append(cs, devCase{coll: "all_reduce", dt: dt, op: op, count: 777, inPlace: true})
	}
	return cs
}

// reducerFor returns the reduction kernels loaded in ctx.
func reducerFor(d *driver.Driver, ctx driver.Context) (cuda.Reducer, error) {
	return kernels.Load(d, ctx)
}
