package cuda_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/internal/route"
)

// The device path (cuda.Shared) against the fake driver, ranks in separate processes
// (the test binary re-run as each rank) and, in one test, ranks of one process: every
// collective x dtype x rank count, ranks sharing a device or on peer devices, each
// result compared byte for byte with core's host collective on the same inputs (the
// CPU reference). The scratch is small, so large counts take several rounds.

const devScratch = 4096

// devLayouts are the devices of the ranks, one comma-separated list per run.
var devLayouts = []string{"0", "0,0", "0,1", "0,0,1", "0,0,0,0", "0,1,2,3"}

func TestDevicePathAcrossProcesses(t *testing.T) {
	open(t)
	requireLayoutsPass(t, devLayouts...)
}

// TestDevicePathWrongStepFails shows the comparison catches a device path that gets
// one step wrong: a missing wait for the peers' ready flags, a wrong offset.
func TestDevicePathWrongStepFails(t *testing.T) {
	open(t)
	requireFaultsCaught(t, "0,0,1", "300,3000", "skip-ready-wait", "offset")
}

// TestDevicePathRanksOfOneProcess runs the ranks as goroutines of this process: they
// use each other's scratch pointers directly (CUDA will not open a handle in the
// process that exported it).
func TestDevicePathRanksOfOneProcess(t *testing.T) {
	d, f := open(t)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	devs := oneContextSafe(f, []int{0, 0, 1})
	inProcessRanks(t, len(devs), func(r int) error { return devRank(d, f, id, r, devs, os.Stderr) })
}

// runDevRanks runs one child process per rank and returns their combined output and
// the first failure.
func runDevRanks(t testing.TB, layout, fault, delay string) (string, error) {
	t.Helper()
	return runDevRanksEnv(t, layout, fault, delay, nil)
}

// runDevRanksEnv is runDevRanks with more environment for rank r's process: env(r).
func runDevRanksEnv(t testing.TB, layout, fault, delay string, env func(r int) []string) (string, error) {
	t.Helper()
	res := ranks{layout: layout, env: []string{"GONCCL_DEVTEST_FAULT=" + fault, "FAKECUDA_DELAY_US=" + delay}, rankEnv: env}.run(t)
	return res.all(), res.err()
}

// devCase is one collective of a rank's script.
type devCase struct {
	coll    string // all_gather, broadcast, all_to_all, gather, scatter, all_reduce, reduce, reduce_scatter
	dt      core.DataType
	op      core.RedOp
	count   int // elements per rank (all_gather, reduce_scatter) or in all
	root    int
	inPlace bool
}

func devCases(nranks int) []devCase {
	var cs []devCase
	counts := []int{0, 1, 7, 1000, 3001}
	for _, dt := range []core.DataType{core.Float32, core.Float16, core.Bfloat16, core.Int64} {
		for _, n := range counts {
			cs = append(cs, devCase{coll: "all_gather", dt: dt, count: n})
			cs = append(cs, devCase{coll: "broadcast", dt: dt, count: n, root: n % nranks})
			cs = append(cs, devCase{coll: "all_to_all", dt: dt, count: n})
			cs = append(cs, devCase{coll: "gather", dt: dt, count: n, root: (n + 1) % nranks})
			cs = append(cs, devCase{coll: "scatter", dt: dt, count: n, root: (n + 2) % nranks})
		}
		cs = append(cs, devCase{coll: "all_to_all", dt: dt, count: 1001, inPlace: true})
		cs = append(cs, devCase{coll: "all_gather", dt: dt, count: 999, inPlace: true})
		cs = append(cs, devCase{coll: "broadcast", dt: dt, count: 999, root: nranks - 1, inPlace: true})
		cs = append(cs, reductionCases(dt, nranks, counts)...)
	}
	return cs
}

// devRank runs the script of cases as rank rank of a communicator whose ranks are on
// devices devs, and reports the first result that differs from the host reference.
func devRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer c.Destroy()
	dev := devs[rank]
	// Two streams, taken in turn: consecutive rounds on different streams of a rank
	// must still not overwrite scratch the previous one reads.
	streams := []uintptr{f.Stream(dev), f.Stream(dev)}
	ctx, err := d.StreamContext(driver.Stream(streams[0]))
	if err != nil {
		return err
	}
	exchange := hostExchange(c)
	var opts []cuda.SharedOption
	if v := os.Getenv("GONCCL_DEVTEST_RING"); v != "" { // "from,chunk": devring_test.go
		var from, chunk int
		if _, err := fmt.Sscanf(v, "%d,%d", &from, &chunk); err != nil {
			return fmt.Errorf("GONCCL_DEVTEST_RING=%q: %w", v, err)
		}
		devTestRingFrom = from
		cuda.SetRingChunk(chunk)
	}
	sh, err := cuda.NewShared(d, ctx, rank, nranks, devScratch, exchange, opts...)
	if err != nil {
		return err
	}
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	// The watcher runs as in capi: on correct operations it must never give up (a
	// false mismatch or timeout would release the streams and break the results).
	watchErr := make(chan error, 1)
	sh.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, CheckAfter: time.Millisecond,
		Fail: func(err error) { watchErr <- err }})
	var bad []string
	only := os.Getenv("GONCCL_DEVTEST_ONLY") // some collectives of the script (devring_test.go)
	for i, dc := range devCases(nranks) {
		if only != "" && !slices.Contains(strings.Split(only, ","), dc.coll) {
			continue
		}
		got, want, err := runDevCase(c, sh, red, f, dev, driver.Stream(streams[i%2]), rank, nranks, i, dc)
		if err != nil {
			return fmt.Errorf("case %d %+v: %w", i, dc, err)
		}
		if !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("MISMATCH case %d %+v (%s)", i, dc, devFirstDiff(got, want)))
		}
	}
	select {
	case err := <-watchErr:
		return fmt.Errorf("the watcher gave up on correct operations: %w", err)
	default:
	}
	if err := sh.Close(time.Minute); err != nil {
		return err
	}
	if n := f.Counters().BadAccess; n != 0 {
		bad = append(bad, fmt.Sprintf("%d bad accesses", n))
	}
	if len(bad) > 0 {
		fmt.Fprintln(log, strings.Join(bad, "\n"))
		return fmt.Errorf("rank %d: %d case(s) failed", rank, len(bad))
	}
	return nil
}

func devFirstDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d = %#x, want %#x", i, got[i], want[i])
		}
	}
	return "equal"
}

// devInput is rank's input of case i: small integers, exact in every float type, so
// that any order of reduction gives the same bits.
func devInput(dt core.DataType, op core.RedOp, n, rank, i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(rank), uint64(i)))
	es := dt.Size()
	b := make([]byte, n*es)
	for j := range n {
		v := rng.IntN(9) - 4
		if op == core.Prod {
			v = []int{-2, -1, 1, 2}[rng.IntN(4)]
		}
		switch dt {
		case core.Float32:
			binary.LittleEndian.PutUint32(b[j*4:], math.Float32bits(float32(v)))
		case core.Float16:
			binary.LittleEndian.PutUint16(b[j*2:], core.Float32ToFloat16(float32(v)))
		case core.Bfloat16:
			binary.LittleEndian.PutUint16(b[j*2:], core.Float32ToBfloat16(float32(v)))
		case core.Int64:
			binary.LittleEndian.PutUint64(b[j*8:], rng.Uint64())
		default:
			panic(dt)
		}
	}
	return b
}

// runDevCase runs case dc on the device path and on the host, returning this rank's
// device result and the host reference.
// devTestRingFrom is the size from which the worker's all_reduce and reduce_scatter
// take the device ring, as the router chooses (GONCCL_DEVTEST_RING; 0: never).
var devTestRingFrom int

func runDevCase(c *core.Comm, sh *cuda.Shared, red cuda.Reducer, f *cudatest.Fake, dev int, s driver.Stream,
	rank, nranks, i int, dc devCase) (got, want []byte, err error) {
	es := dc.dt.Size()
	inN, outN := dc.count, dc.count
	switch dc.coll {
	case "all_gather":
		outN = dc.count * nranks
	case "reduce_scatter":
		inN = dc.count * nranks
	case "all_to_all":
		inN, outN = dc.count*nranks, dc.count*nranks
	case "gather":
		outN = dc.count * nranks
	case "scatter":
		inN = dc.count * nranks
	}
	in := devInput(dc.dt, dc.op, inN, rank, i)
	want = make([]byte, outN*es)
	if err := hostReference(c, dc, in, want); err != nil {
		return nil, nil, err
	}
	recv := f.Malloc(dev, max(outN*es, 1))
	for j := range f.Bytes(recv, outN*es) {
		f.Bytes(recv, outN*es)[j] = 0xEE
	}
	send := f.Malloc(dev, max(inN*es, 1))
	if dc.inPlace {
		switch dc.coll {
		case "all_gather", "reduce_scatter":
			send = recv + uintptr(rank*dc.count*es)
			if dc.coll == "reduce_scatter" {
				panic("in-place reduce_scatter reads the whole buffer: use recv = send + rank's block")
			}
		default:
			send = recv
		}
	}
	copy(f.Bytes(send, inN*es), in)
	switch dc.coll {
	case "all_gather":
		err = sh.AllGather(s, send, recv, dc.count*es)
	case "broadcast":
		err = sh.Broadcast(s, send, recv, dc.count*es, dc.root)
	case "all_reduce":
		if route.DeviceRing(c.Size(), dc.count*es, devTestRingFrom) {
			err = sh.AllReduceRing(s, red, send, recv, dc.count, dc.dt, dc.op)
		} else {
			err = sh.AllReduce(s, red, send, recv, dc.count, dc.dt, dc.op)
		}
	case "reduce":
		err = sh.Reduce(s, red, send, recv, dc.count, dc.dt, dc.op, dc.root)
	case "reduce_scatter":
		if route.DeviceRing(c.Size(), dc.count*c.Size()*es, devTestRingFrom) {
			err = sh.ReduceScatterRing(s, red, send, recv, dc.count, dc.dt, dc.op)
		} else {
			err = sh.ReduceScatter(s, red, send, recv, dc.count, dc.dt, dc.op)
		}
	case "all_to_all":
		err = sh.AlltoAll(s, send, recv, dc.count*es)
	case "gather":
		err = sh.Gather(s, send, recv, dc.count*es, dc.root)
	case "scatter":
		err = sh.Scatter(s, send, recv, dc.count*es, dc.root)
	}
	if err != nil {
		return nil, nil, err
	}
	f.Drain(uintptr(s))
	got = append([]byte(nil), f.Bytes(recv, outN*es)...)
	if (dc.coll == "reduce" || dc.coll == "gather") && rank != dc.root {
		got, want = nil, nil // recv is not written off the root
	}
	return got, want, nil
}

// hostReference runs case dc on core's host collectives: in is this rank's input,
// want receives the result.
func hostReference(c *core.Comm, dc devCase, in, want []byte) error {
	var req *core.Request
	var err error
	switch dc.coll {
	case "all_gather":
		req, err = c.AllGather(in, want, dc.count, dc.dt)
	case "broadcast":
		req, err = c.Broadcast(in, want, dc.count, dc.dt, dc.root)
	case "all_reduce":
		req, err = c.AllReduce(in, want, dc.count, dc.dt, dc.op)
	case "reduce":
		req, err = c.Reduce(in, want, dc.count, dc.dt, dc.op, dc.root)
	case "reduce_scatter":
		req, err = c.ReduceScatter(in, want, dc.count, dc.dt, dc.op)
	case "all_to_all":
		req, err = c.AlltoAll(in, want, dc.count, dc.dt)
	case "gather":
		req, err = c.Gather(in, want, dc.count, dc.dt, dc.root)
	case "scatter":
		req, err = c.Scatter(in, want, dc.count, dc.dt, dc.root)
	default:
		return fmt.Errorf("host reference: no collective %q", dc.coll)
	}
	if err == nil {
		_, err = req.Wait(-1)
	}
	if err != nil {
		return fmt.Errorf("host reference: %w", err)
	}
	return nil
}
