package kernels

import (
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/reduce"
)

// Reducer is what the paths above need of the reduction kernels (*Kernels): the device
// path, the same-GPU path and staging's reduction on the GPU.
type Reducer interface {
	ReduceInto(s driver.Stream, dst, src uintptr, count int, dt reduce.DataType, op reduce.RedOp) error
	// ReduceIntoUnless is ReduceInto reading (or writing) another rank's memory: it
	// touches nothing once the abort word at abort is set (Kernels.ReduceIntoUnless).
	ReduceIntoUnless(s driver.Stream, dst, src uintptr, count int, dt reduce.DataType, op reduce.RedOp, abort uintptr) error
	DivideBy(s driver.Stream, buf uintptr, count int, dt reduce.DataType, n int) error
}
