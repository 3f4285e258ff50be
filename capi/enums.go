package main

// #include "handles.h"
import "C"

import (
	"fmt"

	"github.com/gonccl/gonccl/core"
)

// dataType converts a C data type, refusing values outside core's 8-bit numbering
// (a plain conversion would wrap 263 around to float32) and unknown types. This check
// stays here although core makes it too: capi sizes the caller's buffers from the
// element size (bufBytes) before core sees them, and an unknown type has none.
func dataType(dt C.goncclDataType_t) (core.DataType, error) {
	if v := int64(int32(dt)); v < 0 || v > 255 || !core.DataType(dt).Valid() {
		return 0, fmt.Errorf("%w: unknown data type %d", core.ErrInvalidArgument, int32(dt))
	}
	return core.DataType(dt), nil
}

// redOp converts a C reduction op, refusing only values outside core's 8-bit
// numbering, which a plain conversion would wrap around (256+goncclMax to goncclMax).
// Whether the op is known, and defined for the data type, core checks (reduce.Check)
// when the collective is issued; resultOf maps its error to goncclInvalidArgument or
// goncclNotSupported.
func redOp(op C.goncclRedOp_t) (core.RedOp, error) {
	if v := int64(int32(op)); v < 0 || v > 255 {
		return 0, fmt.Errorf("%w: unknown reduction op %d", core.ErrInvalidArgument, int32(op))
	}
	return core.RedOp(op), nil
}
