//go:build !cgo || !amd64

package reduce

// Without cgo, or off amd64, every reduction runs the pure-Go loops.

// vectorReductions is always false here; see vec_amd64.go.
var vectorReductions = false

// vectorMinBytes is unused here; see vec_amd64.go.
var vectorMinBytes = 0

func reduceVector(dst, src []byte, n int, dt DataType, op RedOp) bool { return false }

func divideVector(buf []byte, count int, dt DataType, n int) bool { return false }
