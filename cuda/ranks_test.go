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
	"github.com/gonccl/gonccl/cuda/cudatest"
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
