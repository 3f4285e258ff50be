package main

// #include "handles.h"
import "C"

import (
	"fmt"

	"github.com/gonccl/gonccl/core"
)

// dataType converts a C data type, refusing values outside core's 8-bit numbering
// (a plain conversion would wrap 263 around to float32).
func dataType(dt C.goncclDataType_t) (core.DataType, error) {
	if v := int64(int32(dt)); v < 0 || v > 255 || !core.DataType(dt).Valid() {
		return 0, fmt.Errorf("%w: unknown data type %d", core.ErrInvalidArgument, int32(dt))
	}
	return core.DataType(dt), nil
}

// redOp converts a C reduction op like dataType.
func redOp(op C.goncclRedOp_t) (core.RedOp, error) {
	if v := int64(int32(op)); v < 0 || v > 255 || !core.RedOp(op).Valid() {
		return 0, fmt.Errorf("%w: unknown reduction op %d", core.ErrInvalidArgument, int32(op))
	}
	return core.RedOp(op), nil
}
