package cuda

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/internal/reduce"
)

// geq is cuStreamWaitValue32's CU_STREAM_WAIT_VALUE_GEQ: (int32)(x - want) >= 0.
func geq(x, want uint32) bool { return int32(x-want) >= 0 }

// agrees is what agree's four waits let through: the peer's words (x, -x) for each of
// the two fields against the own.
func agrees(mine, peer opDesc) bool {
	ms, mc := mine.words()
	ps, pc := peer.words()
	return geq(ps, ms) && geq(-ps, -ms) && geq(pc, mc) && geq(-pc, -mc)
}

func randomDesc(rng *rand.Rand) opDesc {
	dts := []reduce.DataType{reduce.Int8, reduce.Float32, reduce.Float16, reduce.Bfloat16, reduce.Int64, reduce.Complex128, reduce.Bool}
	ops := []reduce.RedOp{reduce.Sum, reduce.Prod, reduce.Max, reduce.Avg, reduce.Band, reduce.Bxor}
	count := rng.IntN(4)
	switch rng.IntN(3) {
	case 1:
		count = rng.IntN(1 << 31)
	case 2:
		count = rng.IntN(maxDevCount)
	}
	if rng.IntN(2) == 0 {
		return byteDesc(opKind(1+rng.IntN(8)), count, rng.IntN(4)-1)
	}
	return reduceDesc(opKind(1+rng.IntN(8)), count, dts[rng.IntN(len(dts))], ops[rng.IntN(len(ops))], rng.IntN(4)-1)
}

// The check lets two descriptors through exactly when they are the same operation,
// and the poison values let every descriptor through.
func TestDescriptorCheckIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		a, b := randomDesc(rng), randomDesc(rng)
		if rng.IntN(4) == 0 {
			b = a
			if rng.IntN(2) == 0 {
				b.count ^= 1 << rng.IntN(37) // one bit of the count off
			}
		}
		require.Equal(t, a == b, agrees(a, b), "%v vs %v", a, b)
		require.Equal(t, a == b, len(a.differences(decodeDesc(b.words()))) == 0, "%v vs %v", a, b)
		s, c := a.words()
		require.Less(t, s, uint32(1<<30))
		require.Less(t, c, uint32(1<<30))
		// Release's values: x = 2^30-1, -x = 0.
		require.True(t, geq(fieldMask, s) && geq(0, -s) && geq(fieldMask, c) && geq(0, -c), "%v", a)
	}
}

func TestDescriptorDifferencesNameTheField(t *testing.T) {
	a := reduceDesc(kindAllReduce, 1000, reduce.Float32, reduce.Sum, -1)
	for _, c := range []struct {
		b    opDesc
		want string
	}{
		{reduceDesc(kindAllReduce, 3000, reduce.Float32, reduce.Sum, -1), "count: 1000 here, 3000 there (elements)"},
		{reduceDesc(kindAllReduce, 1000, reduce.Float16, reduce.Sum, -1), "dtype: float32 here, float16 there"},
		{reduceDesc(kindAllReduce, 1000, reduce.Float32, reduce.Max, -1), "reduction: sum here, max there"},
		{reduceDesc(kindReduce, 1000, reduce.Float32, reduce.Sum, 2), "collective: all_reduce here, reduce there"},
		{reduceDesc(kindReduce, 1000, reduce.Float32, reduce.Sum, 2), "root: -1 here, 2 there"},
		{byteDesc(kindBroadcast, 4000, 0), "dtype: float32 here, bytes (no dtype) there"},
	} {
		require.Contains(t, a.differences(decodeDesc(c.b.words())), c.want)
	}
}

// Flag poison: the last round plus 2^30 satisfies a wait for any round a stream of
// this rank can have queued, however the numbers wrapped.
func TestReleaseSatisfiesEveryFlagWait(t *testing.T) {
	for _, step := range []uint32{0, 1, 7, 1<<31 - 1, 1 << 31, 1<<32 - 2, 1<<32 - 1} {
		poison := step + 1<<30
		for _, back := range []uint32{0, 1, 2, 1000} {
			require.True(t, geq(poison, step-back), "step %d, wait for %d", step, step-back)
		}
		require.True(t, geq(poison, step+1), "a peer one round ahead")
	}
}
