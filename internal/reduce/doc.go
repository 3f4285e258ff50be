// Package reduce holds gonccl's element types and reductions: the DataType and RedOp
// enums (numbered as NCCL's), which (type, op) pairs are defined (CheckReduction), the
// element-wise kernels that combine and average buffers (ReduceInto, DivideBy), the
// half and bfloat16 conversions, complex and bool arithmetic, and the AVX2/F16C C
// kernels that large buffers go to on x86-64.
//
// It is a leaf: it knows nothing of communicators, links or algorithms, and core
// re-exports what callers need (core.DataType is reduce.DataType). All of core's cgo
// lives here, and its only unsafe is viewing a caller's bytes as typed elements.
//
// Reductions must give the same bits on every rank whatever order they combine their
// inputs in: every NaN is canonical, and nothing may fuse or reassociate arithmetic.
// They must not allocate unless they return an error.
package reduce
