package core

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// trueRates are the rates the tests' synthetic measurements come from: far from the
// built-in ones, so an estimate that ignored them would be far off.
var trueRates = calibration{
	link:       linkCost{latencyUS: 40, bwGBs: 0.8},
	reduceGBs:  2,
	copyGBs:    3,
	overheadUS: map[Kind]float64{KindAllReduce: 200, KindAllGather: 260, KindReduceScatter: 230},
	otherUS:    230,
}

var calibKinds = map[Kind]string{KindAllReduce: "all_reduce", KindAllGather: "all_gather", KindReduceScatter: "reduce_scatter"}

// calibSizes are the sizes the bench measures.
var calibSizes = []int{8, 1 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

// measureAt is what c's operation of kind k on bytes would take were trueRates this
// host's: the selector's algorithm priced with them.
func measureAt(c *Comm, k Kind, bytes int) float64 {
	best, ests := c.sel.evaluate(k, bytes)
	return trueRates.price(c.sel.m, c.sel.rows, k, ests[best].algo, bytes)
}

// writeCalibration writes a calibration file of the given entries and returns its path.
func writeCalibration(t *testing.T, entries ...calibEntry) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "calibration.json")
	data, err := json.Marshal(calibFile{Format: calibrationFormat, Entries: entries})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// entryFor is c's calibration entry with trueRates' times at calibSizes.
func entryFor(c *Comm) calibEntry {
	key := c.calibrationKey()
	e := calibEntry{Host: key.host, NRanks: key.nranks, Transport: key.transport, Measured: "test"}
	for _, k := range []Kind{KindAllReduce, KindAllGather, KindReduceScatter} {
		for _, b := range calibSizes {
			e.Points = append(e.Points, calibPoint{Op: calibKinds[k], Bytes: b, US: measureAt(c, k, b)})
		}
	}
	return e
}

// calibratedComms is n ranks over shared memory whose GONCCL_CALIBRATION is path
// (built by mk from rank 0, before any estimate), logging to a returned observer.
func calibratedComms(t *testing.T, n int, mk func(c *Comm) string) ([]*Comm, *observer.ObservedLogs) {
	t.Helper()
	obs, logs := observer.New(zapcore.InfoLevel)
	comms := shmComms(t, n, 1<<16, func(cfg *config) { cfg.test.logTee = obs })
	comms[0].cfg.calibration = mk(comms[0])
	return comms, logs
}

// A calibration file's times become the estimates: the rates fitted to it give back
// each measured point, between the points the model interpolates, and the algorithm
// is still the selector's.
func TestCalibrationFitsTheMeasurements(t *testing.T) {
	for _, n := range []int{2, 4} {
		comms, logs := calibratedComms(t, n, func(c *Comm) string { return writeCalibration(t, entryFor(c)) })
		c := comms[0]
		for k := range calibKinds {
			for _, b := range append([]int{100, 300 << 10, 5 << 20}, calibSizes...) {
				us, algo, err := c.Estimate(k, b)
				require.NoError(t, err)
				want := measureAt(c, k, b)
				require.InEpsilon(t, want, us, 0.02, "n=%d %s %d bytes", n, k, b)
				best, ests := c.sel.evaluate(k, b)
				require.Equal(t, ests[best].algo, algo)
			}
		}
		require.NotNil(t, c.cal)
		require.Less(t, c.cal.worst, 1.02, "the fit is off its own points")
		used := logs.FilterMessageSnippet("time estimates use calibration").All()
		require.Len(t, used, 1, "the calibration's use is logged once")
		require.Contains(t, used[0].Message, "fitted: link latency")
	}
}

// The fitted rates price an operation as the model says: the fixed cost per call, the
// link's latency per message on the critical path, its bandwidth per byte moved.
func TestCalibrationRatesChangeTheEstimate(t *testing.T) {
	comms := shmComms(t, 4, 1<<16, nil)
	c := comms[0]
	c.calOnce.Do(func() {}) // no file: the rates are set by hand
	rates := func(lat, bw, red, ovh float64) *calibration {
		return &calibration{link: linkCost{latencyUS: lat, bwGBs: bw}, reduceGBs: red, copyGBs: 1e9,
			overheadUS: map[Kind]float64{KindAllReduce: ovh}, otherUS: ovh}
	}
	est := func(cal *calibration, k Kind, b int) float64 {
		c.cal = cal
		us, _, err := c.Estimate(k, b)
		require.NoError(t, err)
		return us
	}
	// The fixed cost adds as it is.
	require.InDelta(t, 300, est(rates(10, 1, 1, 400), KindAllReduce, 8)-est(rates(10, 1, 1, 100), KindAllReduce, 8), 1e-9)
	// all_gather over 4 ranks (a ring, n-1 steps of one block) pays the latency 3 times.
	big := 16 << 20
	best, ests := c.sel.evaluate(KindAllGather, big)
	require.Equal(t, AlgoRing, ests[best].algo)
	require.InDelta(t, 3*50, est(rates(60, 1, 1, 100), KindAllGather, big)-est(rates(10, 1, 1, 100), KindAllGather, big), 1e-6)
	// Half the bandwidth: the time to move the bytes doubles (3 blocks of 16 MiB at 1 GB/s).
	moved := 3 * float64(big) / 1e3
	require.InDelta(t, moved, est(rates(10, 0.5, 1, 100), KindAllGather, big)-est(rates(10, 1, 1, 100), KindAllGather, big), 1e-6)
	// A slower reduction shows in reduce_scatter, not in all_gather.
	require.Greater(t, est(rates(10, 1, 0.5, 100), KindReduceScatter, big), est(rates(10, 1, 1, 100), KindReduceScatter, big)+1000)
	require.InDelta(t, est(rates(10, 1, 1, 100), KindAllGather, big), est(rates(10, 1, 0.5, 100), KindAllGather, big), 1e-9)
	// Copying the caller's tensors at 1 GB/s: all_gather takes in one block and hands
	// back four.
	slowCopy := rates(10, 1, 1, 100)
	slowCopy.copyGBs = 1
	require.InDelta(t, 5*float64(big)/1e3, est(slowCopy, KindAllGather, big)-est(rates(10, 1, 1, 100), KindAllGather, big), 1e-3)
	// A kind the calibration did not measure pays the mean fixed cost.
	m := rates(10, 1, 1, 100).rated(c.sel.m)
	require.InDelta(t, 100+m.xfer(1024), est(rates(10, 1, 1, 100), KindSendRecv, 1024), 1e-6)
}

// A calibration file that is missing, garbled or made for another communicator leaves
// the built-in rates, and the log says why, once.
func TestCalibrationFallsBack(t *testing.T) {
	builtin := func(c *Comm, k Kind, b int) float64 {
		best, ests := c.sel.evaluate(k, b)
		return c.builtin(k, b, ests[best].us)
	}
	garbled := func(text string) func(*Comm) string {
		return func(*Comm) string {
			path := filepath.Join(t.TempDir(), "calibration.json")
			require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
			return path
		}
	}
	otherRanks := func(c *Comm) string {
		e := entryFor(c)
		e.NRanks = 7
		return writeCalibration(t, e)
	}
	otherHost := func(c *Comm) string {
		e := entryFor(c)
		e.Host = "elsewhere"
		return writeCalibration(t, e)
	}
	badPoint := func(c *Comm) string {
		e := entryFor(c)
		e.Points[3].US = -1
		return writeCalibration(t, e)
	}
	unknownOp := func(c *Comm) string {
		e := entryFor(c)
		e.Points[0].Op = "all_reduce_fast"
		return writeCalibration(t, e)
	}
	onePoint := func(c *Comm) string {
		e := entryFor(c)
		e.Points = e.Points[:1]
		return writeCalibration(t, e)
	}
	cases := []struct {
		name  string
		mk    func(*Comm) string
		level zapcore.Level
		says  string
	}{
		{"missing", func(*Comm) string { return filepath.Join(t.TempDir(), "none.json") }, zapcore.InfoLevel, "no calibration file at"},
		{"none", func(*Comm) string { return "" }, zapcore.InfoLevel, "GONCCL_CALIBRATION=none"},
		{"not json", garbled("{not json"), zapcore.WarnLevel, "is not JSON of the calibration format"},
		{"other format", garbled(`{"format": "something/2", "entries": []}`), zapcore.WarnLevel, `has format "something/2"`},
		{"other ranks", otherRanks, zapcore.InfoLevel, "7 ranks, shm)"},
		{"other host", otherHost, zapcore.InfoLevel, "(it has: host elsewhere, 3 ranks"},
		{"bad point", badPoint, zapcore.WarnLevel, "point 3 (all_reduce): 1048576 bytes in -1 us is not a measurement"},
		{"unknown op", unknownOp, zapcore.WarnLevel, `unknown operation "all_reduce_fast"`},
		{"one point", onePoint, zapcore.WarnLevel, "a fit needs two sizes at least"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			comms, logs := calibratedComms(t, 3, tc.mk)
			c := comms[0]
			for _, b := range []int{8, 1 << 20} {
				us, _, err := c.Estimate(KindAllReduce, b)
				require.NoError(t, err)
				require.InDelta(t, builtin(c, KindAllReduce, b), us, 1e-9)
			}
			require.Nil(t, c.cal)
			said := logs.FilterMessageSnippet("time estimates use the built-in rates").All()
			require.Len(t, said, 1, "logged once")
			require.Equal(t, tc.level, said[0].Level)
			require.Contains(t, said[0].Message, tc.says)
		})
	}
}

// The fit finds the rates behind its points from the built-in starting point, at 2 to
// 8 ranks, and nelderMead minimises a plain bowl.
func TestCalibrationFitRecoversRates(t *testing.T) {
	x := nelderMead(func(x []float64) float64 { return (x[0]-3)*(x[0]-3) + 10*(x[1]+1)*(x[1]+1) }, []float64{0, 0}, 1, 2000)
	require.InDelta(t, 3, x[0], 1e-4)
	require.InDelta(t, -1, x[1], 1e-4)
	for _, n := range []int{2, 3, 8} {
		c := shmComms(t, n, 1<<16, nil)[0]
		cal := fitCalibration(c.sel.m, c.sel.rows, c.sel.priced(entryFor(c).Points))
		require.Less(t, cal.worst, 1.02, "n=%d: %s", n, cal)
		require.Less(t, math.Abs(cal.overhead(KindAllReduce)/200-1), 0.1, "n=%d: %s", n, cal)
	}
	require.Nil(t, fitCalibration(model{}, nil, nil))
}
