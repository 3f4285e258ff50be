package kernels

import (
	"sort"

	"github.com/gonccl/gonccl/internal/reduce"
)

// The kernels' names, as the tables in cuda/kernels/reduce.cuh and multi.cuh generate
// them: gonccl_reduce_<op>_<dtype>, gonccl_divide_<dtype> and gonccl_multi_<op>_<dtype>.

// kernelDtypes gives each data type's name in kernel names; float8 has none (reductions
// on it are not supported).
var kernelDtypes = map[reduce.DataType]string{
	reduce.Int8: "i8", reduce.Uint8: "u8", reduce.Int16: "i16", reduce.Uint16: "u16",
	reduce.Int32: "i32", reduce.Uint32: "u32", reduce.Int64: "i64", reduce.Uint64: "u64",
	reduce.Float16: "f16", reduce.Bfloat16: "bf16", reduce.Float32: "f32", reduce.Float64: "f64",
	reduce.Bool: "bool", reduce.Complex64: "c64", reduce.Complex128: "c128",
}

// reduceKey is the kernel that reduces dt with op, a pair CheckReduction accepts: avg
// reduces with sum, and Bool's logical sum/max and prod/min are bor and band.
func reduceKey(dt reduce.DataType, op reduce.RedOp) kernelKey {
	switch {
	case op == reduce.Avg:
		op = reduce.Sum
	case dt == reduce.Bool && (op == reduce.Sum || op == reduce.Max):
		op = reduce.Bor
	case dt == reduce.Bool && (op == reduce.Prod || op == reduce.Min):
		op = reduce.Band
	}
	return kernelKey{dt: dt, op: op}
}

// multiKey is the one-pass kernel that reduces dt with op: reduceKey's kernel, except
// that avg has its own (the sum, then the division, in the same pass).
func multiKey(dt reduce.DataType, op reduce.RedOp) kernelKey {
	k := reduceKey(dt, op)
	if op == reduce.Avg {
		k.op = reduce.Avg
	}
	k.multi = true
	return k
}

// kernelName is k's name in the fatbin.
func kernelName(k kernelKey) string {
	switch {
	case k.div:
		return "gonccl_divide_" + kernelDtypes[k.dt]
	case k.multi:
		return "gonccl_multi_" + k.op.String() + "_" + kernelDtypes[k.dt]
	}
	return "gonccl_reduce_" + k.op.String() + "_" + kernelDtypes[k.dt]
}

// kernelKeys lists every kernel ReduceInto, DivideBy and ReduceMany use, each once, in
// name order: one per (dt, op) pair CheckReduction accepts, after reduceKey, a division
// kernel for every dt that supports avg, and a one-pass kernel per pair after multiKey.
func kernelKeys() []kernelKey {
	seen := map[kernelKey]bool{}
	var keys []kernelKey
	add := func(k kernelKey) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for d := 0; d < 256; d++ {
		dt := reduce.DataType(d)
		for o := 0; o < 256; o++ {
			if op := reduce.RedOp(o); reduce.CheckReduction(dt, op) == nil {
				add(reduceKey(dt, op))
				add(multiKey(dt, op))
			}
		}
		if reduce.CheckReduction(dt, reduce.Avg) == nil {
			add(kernelKey{dt: dt, div: true})
		}
	}
	sort.Slice(keys, func(i, j int) bool { return kernelName(keys[i]) < kernelName(keys[j]) })
	return keys
}
