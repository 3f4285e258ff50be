//go:build cgo

package reduce

/*
#cgo noescape gonccl_reduce
#cgo nocallback gonccl_reduce
#cgo noescape gonccl_divide
#cgo nocallback gonccl_divide
#include "kernels.h"
*/
import "C"

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// vectorReductions says whether ReduceInto and DivideBy hand large buffers
// to the AVX2/F16C kernels in kernels_amd64.c. It is decided once
// from the CPU (x/sys/cpu sets HasAVX2 only when the OS saves the vector
// registers); tests turn it off to run the pure-Go fallback.
var vectorReductions = cpu.X86.HasAVX2 && cpu.X86.HasF16C

// vectorMinBytes is the smallest buffer of 32- and 64-bit elements the
// kernels get: below it the pure-Go loops finish before a cgo call (~100-150
// ns on the dev VM) would return. The pure-Go loops are slower per byte on
// 8-bit integers and far slower on 16-bit floats, so those go to the kernels
// from a quarter and an eighth of it. Measured with BenchmarkReduceIntoSmall;
// tests set it to zero to reach the kernels' tails.
var vectorMinBytes = 1024

// vectorKernel is how a data type is handed to the kernels: kind is the
// kernel kind plus one (zero: no kernel), and the kernels take buffers of at
// least vectorMinBytes>>shift bytes.
type vectorKernel struct {
	kind, shift uint8
}

var vectorKernels = [256]vectorKernel{
	Int8:     {C.GONCCL_K_I8 + 1, 2},
	Uint8:    {C.GONCCL_K_U8 + 1, 2},
	Int16:    {C.GONCCL_K_I16 + 1, 0},
	Uint16:   {C.GONCCL_K_U16 + 1, 0},
	Int32:    {C.GONCCL_K_I32 + 1, 0},
	Uint32:   {C.GONCCL_K_U32 + 1, 0},
	Int64:    {C.GONCCL_K_I64 + 1, 0},
	Uint64:   {C.GONCCL_K_U64 + 1, 0},
	Float16:  {C.GONCCL_K_F16 + 1, 3},
	Bfloat16: {C.GONCCL_K_BF16 + 1, 3},
	Float32:  {C.GONCCL_K_F32 + 1, 0},
	Float64:  {C.GONCCL_K_F64 + 1, 0},
}

// vectorKind returns the kernel kind for nbytes of dt, or false when the
// pure-Go loops should run: no kernel for dt, a small buffer, or a CPU
// without AVX2 and F16C.
func vectorKind(dt DataType, nbytes int) (C.int, bool) {
	k := vectorKernels[dt]
	if k.kind == 0 || !vectorReductions || nbytes < vectorMinBytes>>k.shift {
		return 0, false
	}
	return C.int(k.kind - 1), true
}

// vectorOp returns the kernel op for op; Avg reduces like Sum.
func vectorOp(op RedOp) C.int {
	switch op {
	case Prod:
		return C.GONCCL_OP_PROD
	case Max:
		return C.GONCCL_OP_MAX
	case Min:
		return C.GONCCL_OP_MIN
	case Band:
		return C.GONCCL_OP_BAND
	case Bor:
		return C.GONCCL_OP_BOR
	case Bxor:
		return C.GONCCL_OP_BXOR
	}
	return C.GONCCL_OP_SUM
}

// reduceVector reduces the n elements of src into dst with one cgo call and
// reports true, or reports false, leaving dst untouched, when the pure-Go
// loops should do it (see vectorKind). (dt, op) has passed Check
// and n is positive.
func reduceVector(dst, src []byte, n int, dt DataType, op RedOp) bool {
	kind, ok := vectorKind(dt, len(dst))
	if !ok {
		return false
	}
	C.gonccl_reduce(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)),
		C.size_t(n), kind, vectorOp(op))
	return true
}

// divideVector is DivideBy's counterpart of reduceVector. Its kernels divide
// floats, and integers of up to 32 bits exactly in float64 when n is exact in
// float64 (always, for a rank count); 64-bit integers stay in Go.
func divideVector(buf []byte, count int, dt DataType, n int) bool {
	kind, ok := vectorKind(dt, len(buf))
	if !ok || (!dt.IsFloat() && (dt.Size() == 8 || n > 1<<53)) {
		return false
	}
	C.gonccl_divide(unsafe.Pointer(unsafe.SliceData(buf)), C.size_t(count), kind,
		C.float(float32(n)), C.double(float64(n)))
	return true
}
