package cuda_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// ranks is one run of a test's ranks as child processes of the test binary, the one
// harness of this package's multi-process tests: each child runs TestMain's child
// branch (devChild, or faultChild under GONCCL_FAULTTEST) as rank r of layout, on the
// fake driver this binary built, with one communicator id. Every child dies with the
// test (SIGKILL on the parent's death, and at the run's limit).
type ranks struct {
	layout  string               // each rank's device, "0,0,1": one rank per entry
	env     []string             // for every rank: GONCCL_DEVTEST_SCRIPT=..., FAKECUDA_...
	rankEnv func(r int) []string // more for rank r (later entries win)
	victims []int                // ranks the case kills or stops: their exit is not checked, and they are killed once the others have exited
	limit   time.Duration        // the whole run's (default 90 s)
}

// ranksResult is what a run of ranks gave.
type ranksResult struct {
	outs    []string      // each rank's stdout and stderr
	errs    []error       // each rank's exit
	took    time.Duration // until the last rank that is not a victim exited
	timeout bool          // the limit passed first (every child was killed)
	victims []int
}

// run starts the ranks, waits for every one that is not a victim, then kills the
// victims (a stopped one never exits by itself).
func (rs ranks) run(t testing.TB) ranksResult {
	t.Helper()
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	n := len(strings.Split(rs.layout, ","))
	limit := rs.limit
	if limit == 0 {
		limit = 90 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	outs := make([]bytes.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	start := time.Now()
	for r := range n {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GONCCL_DEVTEST_RANK="+strconv.Itoa(r), "GONCCL_DEVTEST_DEVS="+rs.layout,
			"GONCCL_DEVTEST_ID="+hex.EncodeToString(id[:]), "GONCCL_DEVTEST_FAKE="+cudatest.Path(t))
		cmd.Env = append(cmd.Env, rs.env...)
		if rs.rankEnv != nil {
			cmd.Env = append(cmd.Env, rs.rankEnv(r)...)
		}
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			for _, c := range cmds[:r] {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
			require.NoError(t, err)
		}
		cmds[r] = cmd
	}
	res := ranksResult{outs: make([]string, n), errs: make([]error, n), victims: rs.victims}
	for r, cmd := range cmds {
		if !slices.Contains(rs.victims, r) {
			res.errs[r] = cmd.Wait()
		}
	}
	res.took = time.Since(start)
	for _, r := range rs.victims {
		_ = cmds[r].Process.Kill()
		res.errs[r] = cmds[r].Wait()
	}
	res.timeout = ctx.Err() != nil
	for r := range outs {
		res.outs[r] = outs[r].String()
	}
	return res
}

// all is every rank's output, each under a header with its exit.
func (res ranksResult) all() string {
	var b strings.Builder
	for r, out := range res.outs {
		fmt.Fprintf(&b, "--- rank %d (%v)\n%s", r, res.errs[r], out)
	}
	return b.String()
}

// err is the run's first failure: the limit, or a rank that is not a victim exiting
// other than with 0.
func (res ranksResult) err() error {
	if res.timeout {
		return fmt.Errorf("ranks timed out after %v", res.took.Round(time.Second))
	}
	for r, err := range res.errs {
		if err != nil && !slices.Contains(res.victims, r) {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// rankScript is one rank's part of a multi-process test: rank of len(devs), on its
// device devs[rank], in the communicator id; it prints what the test reads to log.
type rankScript func(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error

// rankScripts are the scripts a child runs, by GONCCL_DEVTEST_SCRIPT (devRank when it is
// unset): a new multi-process test is a row here, its script, and a ranks{} run.
var rankScripts = map[string]rankScript{
	"p2p":                   devP2PRank,         // devp2p_test.go
	"samegpu":               sameGPURank,        // samegpu_test.go
	"samegpu-mismatch":      sameGPURank,        //
	"gpuwaits":              sameGPURank,        //
	"timesliced":            timeSlicedRank,     // samegpu_bench_test.go
	"window":                windowRank,         // window_test.go
	"window-dead":           windowRank,         //
	"window-mixed":          windowRank,         //
	"samegpu-hotpath":       sameGPUHotPathRank, // samegpu_hotpath_test.go
	"one-context":           oneContextRanks,    // hwqueue_test.go
	"ipc-refcount":          ipcRefcountRank,    // fakeipc_test.go
	"samegpu-fault":         sameGPUFaultRank,   // samegpu_fault_test.go
	"samegpu-refused":       sameGPUFaultRank,   //
	"samegpu-overlap":       sameGPUOverlapRank, // samegpu_overlap_test.go
	"samegpu-realloc":       sameGPURealloc,     // samegpu_realloc_test.go
	"samegpu-overlap-fault": sameGPUOverlapRank, //
}

// devChild is a child process's main: one rank of a ranks{} run, running the script
// GONCCL_DEVTEST_SCRIPT names.
func devChild() int {
	run := devRank
	if name := os.Getenv("GONCCL_DEVTEST_SCRIPT"); name != "" {
		if run = rankScripts[name]; run == nil {
			fmt.Printf("GONCCL_DEVTEST_SCRIPT=%s: no such script\n", name)
			return 2
		}
	}
	return childMain(run)
}

// childMain runs script as the rank the environment names (ranks.run sets it): it
// parses the rank, the layout and the id, sets the test fault, loads the driver and
// the fake; 2 when that fails, 3 when the script does, else 0.
func childMain(script rankScript) int {
	rank, _ := strconv.Atoi(os.Getenv("GONCCL_DEVTEST_RANK"))
	var devs []int
	for _, s := range strings.Split(os.Getenv("GONCCL_DEVTEST_DEVS"), ",") {
		v, _ := strconv.Atoi(s)
		devs = append(devs, v)
	}
	var id core.UniqueID
	b, _ := hex.DecodeString(os.Getenv("GONCCL_DEVTEST_ID"))
	copy(id[:], b)
	cuda.SetTestFault(os.Getenv("GONCCL_DEVTEST_FAULT"))
	path := os.Getenv("GONCCL_DEVTEST_FAKE")
	d, err := driver.Open(path)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	f, err := cudatest.Open(path)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	if err := script(d, f, id, rank, devs, os.Stdout); err != nil {
		fmt.Println(err)
		return 3
	}
	return 0
}

// openedRank is what most scripts start from: the rank's communicator, its device, a
// stream of that device and the stream's context.
type openedRank struct {
	c   *core.Comm
	dev int
	s   driver.Stream
	ctx driver.Context
}

// openRank joins rank to the communicator id, its operations' timeout given, and takes
// a stream of its device. The caller destroys (or aborts) r.c.
func openRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, timeout time.Duration) (*openedRank, error) {
	c, err := core.NewComm(id, len(devs), rank, core.Options{Timeout: timeout})
	if err != nil {
		return nil, err
	}
	dev := devs[rank]
	s := driver.Stream(f.Stream(dev))
	ctx, err := d.StreamContext(s)
	if err != nil {
		c.Destroy()
		return nil, err
	}
	return &openedRank{c: c, dev: dev, s: s, ctx: ctx}, nil
}
