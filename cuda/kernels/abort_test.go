package kernels_test

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/kernels"
	"github.com/gonccl/gonccl/internal/reduce"
)

// The abort word (reduce.cuh's aborted): a kernel that reads another rank's memory
// (Kernels.ReduceIntoUnless, ReduceManyUnless) reads the word first and, once it is set,
// returns without touching any buffer; unset (or no word), it reduces as ReduceInto and
// ReduceMany do.

// checkAbortWord runs both kernels with the word unset, then set, on mem: the first
// reduce, the second leave every buffer as it was.
func checkAbortWord(t *testing.T, mem devMem, k *kernels.Kernels, s driver.Stream) {
	const n = 4099 // a head, packs and a tail over more than one block
	word := mem.alloc(16)
	dst, src, out := mem.alloc(4*n), mem.alloc(4*n), mem.alloc(4*n)
	defer func() {
		for _, p := range []uintptr{word, dst, src, out} {
			mem.free(p)
		}
	}()
	setWord := func(v uint32) { cudatest.Poke(word, binary.LittleEndian.AppendUint32(nil, v)) }
	reset := func() {
		cudatest.Poke(dst, f32Bytes(n, 5))
		cudatest.Poke(src, f32Bytes(n, 2))
		cudatest.Poke(out, f32Bytes(n, 9))
	}

	setWord(0)
	reset()
	require.NoError(t, k.ReduceIntoUnless(s, dst, src, n, reduce.Float32, reduce.Sum, word))
	require.NoError(t, k.ReduceManyUnless(s, []uintptr{out}, []uintptr{dst, src}, n, reduce.Float32, reduce.Sum, word))
	mem.drain(s)
	require.Equal(t, f32Bytes(n, 7), cudatest.Peek(dst, 4*n), "an unset word: the two-operand kernel reduces")
	require.Equal(t, f32Bytes(n, 9), cudatest.Peek(out, 4*n), "an unset word: the one-pass kernel reduces")

	setWord(1)
	reset()
	require.NoError(t, k.ReduceIntoUnless(s, dst, src, n, reduce.Float32, reduce.Sum, word))
	require.NoError(t, k.ReduceManyUnless(s, []uintptr{out}, []uintptr{dst, src}, n, reduce.Float32, reduce.Avg, word))
	mem.drain(s)
	require.Equal(t, f32Bytes(n, 5), cudatest.Peek(dst, 4*n), "a set word: the two-operand kernel wrote nothing")
	require.Equal(t, f32Bytes(n, 2), cudatest.Peek(src, 4*n))
	require.Equal(t, f32Bytes(n, 9), cudatest.Peek(out, 4*n), "a set word: the one-pass kernel wrote nothing")

	// No word at all: the kernels of the paths that read only their own memory.
	reset()
	require.NoError(t, k.ReduceInto(s, dst, src, n, reduce.Float32, reduce.Sum))
	mem.drain(s)
	require.Equal(t, f32Bytes(n, 7), cudatest.Peek(dst, 4*n))
}

func f32Bytes(n int, v float32) []byte {
	b := make([]byte, 0, 4*n)
	for _, x := range filled(n, v) {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func TestKernelsAbortWord(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		checkAbortWord(t, fakeMem{fk}, k, s)
	})
}

// TestKernelsAbortWordSetWhileQueued: the word is read when the kernel runs, not when
// it is launched: a kernel queued behind other work that finds it set by then touches
// nothing, and the fake counts it.
func TestKernelsAbortWordSetWhileQueued(t *testing.T) {
	_, fk := cudatest.Load(t)
	onDevice(t, 0, func(k *kernels.Kernels, s driver.Stream) {
		const n = 1000
		word, dst, src := fk.Malloc(0, 16), fk.Malloc(0, 4*n), fk.Malloc(0, 4*n)
		cudatest.Poke(word, make([]byte, 4))
		fk.SetFloats(src, filled(n, 2))
		before, err := cudatest.StrictCountersAt(cudatest.Path(t))
		require.NoError(t, err)
		require.NoError(t, fk.Fill(uintptr(s), dst, n, 5, 200000)) // runs 200 ms late
		require.NoError(t, k.ReduceIntoUnless(s, dst, src, n, reduce.Float32, reduce.Sum, word))
		require.NoError(t, k.ReduceManyUnless(s, []uintptr{dst}, []uintptr{dst, src}, n, reduce.Float32, reduce.Sum, word))
		cudatest.Poke(word, []byte{1, 0, 0, 0}) // while both wait behind the fill
		fk.Drain(uintptr(s))
		after, err := cudatest.StrictCountersAt(cudatest.Path(t))
		require.NoError(t, err)
		require.Equal(t, filled(n, 5), fk.Floats(dst, n), "the kernels found the word set and wrote nothing")
		require.Equal(t, 2, after.KernelsAborted-before.KernelsAborted)
		for _, p := range []uintptr{word, dst, src} {
			require.NoError(t, fk.Free(p))
		}
	})
}
