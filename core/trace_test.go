package core

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFlightRecorderKeepsTheLastN(t *testing.T) {
	f := newFlightRecorder(4, 1, 3, "")
	for seq := uint64(1); seq <= 10; seq++ {
		f.enqueued(&op{kind: KindAllReduce, seq: seq, count: int(seq * 100), dtype: Float32, redop: Max, root: -1})
		if seq <= 9 {
			f.started(seq)
		}
		if seq <= 8 {
			var err error
			if seq == 6 || seq == 8 {
				err = errors.New("boom")
			}
			require.Equal(t, seq == 6, f.finished(seq, AlgoRing, err), "seq %d: only the first failure asks for a dump", seq)
		}
	}
	got := f.entries()
	require.Len(t, got, 4)
	for i, e := range got {
		require.Equal(t, uint64(7+i), e.Seq)
		require.Equal(t, KindAllReduce, e.Kind)
		require.Equal(t, Max, e.RedOp)
		require.Equal(t, e.Seq*100, e.Count)
		require.Equal(t, e.Seq*400, e.Bytes)
		require.False(t, e.Enqueued.IsZero())
	}
	require.Equal(t, TraceCompleted, got[0].State)
	require.Equal(t, AlgoRing, got[0].Algo)
	require.Equal(t, TraceFailed, got[1].State)
	require.Equal(t, "boom", got[1].Err)
	require.Equal(t, TraceStarted, got[2].State)
	require.True(t, got[2].Finished.IsZero())
	require.Equal(t, TraceQueued, got[3].State)
	require.True(t, got[3].Started.IsZero())
	// A late event for an operation that has left the ring changes nothing.
	f.started(2)
	f.finished(3, AlgoTree, nil)
	require.Equal(t, got, f.entries())
}

func TestFlightRecorderOff(t *testing.T) {
	f := newFlightRecorder(0, 0, 2, t.TempDir())
	require.Nil(t, f)
	f.enqueued(&op{seq: 1})
	f.started(1)
	require.False(t, f.finished(1, AlgoRing, errors.New("x")))
	require.Nil(t, f.entries())
	require.ErrorIs(t, f.dump(t.TempDir(), "test"), ErrInvalidArgument)
}

func TestFlightRecorderDoesNotAllocate(t *testing.T) {
	f := newFlightRecorder(64, 0, 2, "")
	o := &op{kind: KindBroadcast, dtype: Int32, count: 5, root: 1}
	allocs := testing.AllocsPerRun(1000, func() {
		o.seq++
		f.enqueued(o)
		f.started(o.seq)
		f.finished(o.seq, AlgoTree, nil)
	})
	require.Zero(t, allocs)
}

func readTrace(t *testing.T, path string) traceFile {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var tf traceFile
	require.NoError(t, json.Unmarshal(b, &tf))
	return tf
}

// A communicator records its collectives; on the first failure each rank writes its
// recorder to GONCCL_TRACE_DUMP_DIR, and again when it closes.
func TestFlightRecorderDumpsOnFailureAndClose(t *testing.T) {
	dir := t.TempDir()
	comms := memComms(t, 2, func(c *config) { c.traceSize, c.traceDir = 8, dir })
	for i := 0; i < 3; i++ {
		for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
			buf := make([]byte, 4*16)
			return c.AllReduce(buf, buf, 16, Float32, Sum)
		}) {
			require.NoError(t, err, "rank %d", r)
		}
	}
	entries := comms[1].Trace()
	require.Len(t, entries, 3)
	for _, e := range entries {
		require.Equal(t, TraceCompleted, e.State)
		require.NotEqual(t, AlgoNone, e.Algo)
		require.False(t, e.Finished.Before(e.Started))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	require.Empty(t, files, "nothing is written while all goes well")

	counts := []int{1024, 2048}
	errs := onAll(t, comms, func(c *Comm) (*Request, error) {
		buf := make([]byte, 4*counts[c.rank])
		return c.AllReduce(buf, buf, counts[c.rank], Float32, Sum)
	})
	require.ErrorIs(t, errs[0], ErrMismatch)
	for r, c := range comms {
		path := filepath.Join(dir, c.trace.fileName())
		tf := readTrace(t, path)
		require.Equal(t, r, tf.Rank)
		require.Equal(t, 2, tf.NRanks)
		require.Equal(t, os.Getpid(), tf.Pid)
		require.Contains(t, tf.Reason, "failure")
		require.Len(t, tf.Ops, 4)
		last := tf.Ops[3]
		require.Equal(t, uint64(4), last.Seq)
		require.Equal(t, "all_reduce", last.Op)
		require.Equal(t, "float32", last.DType)
		require.Equal(t, uint64(counts[r]), last.Count)
		require.Equal(t, "failed", last.State)
		require.Contains(t, last.Error, "mismatch")
		require.NotNil(t, last.Finished)
		require.Equal(t, "completed", tf.Ops[2].State)
	}
	require.NoError(t, comms[0].Destroy())
	tf := readTrace(t, filepath.Join(dir, comms[0].trace.fileName()))
	require.Equal(t, "communicator closed", tf.Reason)

	// On demand, to a file of the caller's choice.
	path := filepath.Join(t.TempDir(), "mine.json")
	require.NoError(t, comms[1].DumpTrace(path))
	require.Equal(t, "on demand", readTrace(t, path).Reason)
	require.ErrorIs(t, comms[1].DumpTrace(""), ErrInvalidArgument)
}

// The communicator id in file names is the same on every rank and differs between
// communicators.
func TestCommIDOf(t *testing.T) {
	var a, b UniqueID
	_, _ = rand.Read(a[:])
	_, _ = rand.Read(b[:])
	ida := commIDOf(&a)
	require.Equal(t, ida, commIDOf(&a))
	require.NotEqual(t, ida, commIDOf(&b))
	require.Len(t, ida, 12)
}

// BenchmarkFlightRecorder: the recorder's cost per operation (enqueue, start, finish).
func BenchmarkFlightRecorder(b *testing.B) {
	f := newFlightRecorder(2000, 0, 2, "")
	o := &op{kind: KindAllReduce, dtype: Float32, count: 1024, root: -1}
	b.ReportAllocs()
	for b.Loop() {
		o.seq++
		f.enqueued(o)
		f.started(o.seq)
		f.finished(o.seq, AlgoRing, nil)
	}
}
