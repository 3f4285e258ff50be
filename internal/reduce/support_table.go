package reduce

// WantReductionOps is CheckReduction's support table written out by hand, for
// tests: the ops each data type reduces with. Every other valid pair must fail
// with ErrInvalidArgument, except on the float8 types (absent here), where every
// op fails with ErrNotSupported. TestCheckReductionTable holds CheckReduction to
// it, and the tests of other packages (core's) take the pairs they sweep from it
// rather than from the code under test, so support that goes missing fails them
// instead of shrinking what they test. Production code must not read it.
var WantReductionOps = map[DataType][]RedOp{
	Int8:       {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Uint8:      {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Int16:      {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Uint16:     {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Int32:      {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Uint32:     {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Int64:      {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Uint64:     {Sum, Prod, Max, Min, Avg, Band, Bor, Bxor},
	Float16:    {Sum, Prod, Max, Min, Avg},
	Float32:    {Sum, Prod, Max, Min, Avg},
	Float64:    {Sum, Prod, Max, Min, Avg},
	Bfloat16:   {Sum, Prod, Max, Min, Avg},
	Bool:       {Sum, Prod, Max, Min, Band, Bor, Bxor},
	Complex64:  {Sum, Prod, Avg},
	Complex128: {Sum, Prod, Avg},
}
