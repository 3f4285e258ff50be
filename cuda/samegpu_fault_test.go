package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
	"github.com/gonccl/gonccl/cuda/samegpu"
)

// A rank of the same-GPU path that dies or stops in the middle of an operation must
// not leave the others waiting for the operation's timeout (torch's: 30 minutes): every
// host wait of the path watches the communicator's error (SameGPU.Watch), which a
// lost link or missed heartbeats set, naming the rank. Three processes on one fake
// GPU run an all_reduce they all agree on; then the victim is SIGKILLed or SIGSTOPped
// instead of calling the next one, while the others are in it (the launcher waiting
// for its input, the other follower for the launcher's kernels; or, the launcher the
// victim, both followers for its kernels). Every survivor must fail that operation
// with an error naming the victim within a few heartbeat timeouts (the communicator's
// timeout is far longer), and refuse the next.

const (
	sameFaultHeartbeat = 2 * time.Second  // GONCCL_HEARTBEAT_TIMEOUT_MS in the children
	sameFaultTimeout   = 60 * time.Second // the communicator's and the path's timeout
	sameFaultWithin    = 5 * sameFaultHeartbeat
)

func TestSameGPUPeerFailsMidOperation(t *testing.T) {
	open(t)
	for _, c := range []struct {
		name   string
		victim int
		how    string // kill: SIGKILL; stop: SIGSTOP (alive, silent)
	}{
		{"follower-killed", 1, "kill"},
		{"launcher-killed", 0, "kill"},
		{"follower-stopped", 2, "stop"},
		{"launcher-stopped", 0, "stop"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := sameGPUFaultRun(t, c.victim, c.how, sameFaultTimeout, true)
			require.False(t, res.timeout, "%s", res.all())
			require.NoError(t, res.err(), "%s", res.all())
			for r, out := range res.outs {
				if r == c.victim {
					continue
				}
				line := errLine(out)
				require.Regexp(t, fmt.Sprintf(`rank %d\b`, c.victim), line, "rank %d's error must name rank %d:\n%s", r, c.victim, res.all())
				took := afterLine(t, out)
				require.Less(t, took, sameFaultWithin, "rank %d waited %v for rank %d (heartbeat timeout %v)", r, took, c.victim, sameFaultHeartbeat)
				require.Contains(t, out, "NEXT OP REFUSED", "rank %d:\n%s", r, out)
				t.Logf("rank %d after %v: %s", r, took, line)
			}
		})
	}
}

// TestSameGPUUnwatchedWaitsForTheTimeout shows what the test above guards against:
// the same stopped follower with the path not watching the communicator
// (GONCCL_DEVTEST_NOWATCH), as before Watch: the launcher waits out the path's whole
// timeout (5 s here), long after the heartbeats said the follower was silent.
func TestSameGPUUnwatchedWaitsForTheTimeout(t *testing.T) {
	open(t)
	timeout := 5 * time.Second
	res := sameGPUFaultRun(t, 1, "stop", timeout, false)
	require.NoError(t, res.err(), "%s", res.all())
	require.Contains(t, errLine(res.outs[0]), "timed out on the same-GPU path", "%s", res.all())
	require.GreaterOrEqual(t, afterLine(t, res.outs[0]), timeout, "%s", res.all())
}

// TestSameGPUConnectRefusedOnOneRank: a rank that cannot open its peers' pages
// (samegpu-page-refused, in that process only: as where another process's
// /proc/<pid>/fd is closed to it) after every rank said it could take part gets
// ErrRefused naming it, so its caller can tell the others
// that the path is off for all. The others connect, or, if the refused rank had
// already closed its page, are refused too, each naming itself. Before, the rank got
// the bare driver error, which looked like any failure of the machine.
func TestSameGPUConnectRefusedOnOneRank(t *testing.T) {
	open(t)
	res := ranks{layout: "0,0,0", env: []string{"GONCCL_DEVTEST_SCRIPT=samegpu-refused", "FAKECUDA_DELAY_US=0,50"},
		rankEnv: func(r int) []string {
			if r == 1 {
				return []string{"GONCCL_DEVTEST_FAULT=samegpu-page-refused"}
			}
			return nil
		}, limit: 60 * time.Second}.run(t)
	require.NoError(t, res.err(), "%s", res.all())
	require.Contains(t, res.outs[1], "rank 1: REFUSED: cuda: a rank could not connect to the same-GPU path: rank 1: ", res.all())
	for _, r := range []int{0, 2} {
		require.Regexp(t, fmt.Sprintf(`rank %d: (CONNECTED|REFUSED: .*: rank %d: )`, r, r), res.outs[r], res.all())
	}
}

// sameGPUFaultRun runs three ranks on one GPU with victim killed or stopped (how)
// before its second all_reduce; watch says whether the path watches the communicator.
func sameGPUFaultRun(t *testing.T, victim int, how string, timeout time.Duration, watch bool) ranksResult {
	env := []string{"GONCCL_DEVTEST_SCRIPT=samegpu-fault", "FAKECUDA_DELAY_US=0,50",
		"GONCCL_DEVTEST_VICTIM=" + strconv.Itoa(victim), "GONCCL_DEVTEST_HOW=" + how,
		"GONCCL_DEVTEST_TIMEOUT=" + timeout.String(),
		"GONCCL_HEARTBEAT_TIMEOUT_MS=" + strconv.Itoa(int(sameFaultHeartbeat.Milliseconds()))}
	if !watch {
		env = append(env, "GONCCL_DEVTEST_NOWATCH=1")
	}
	return ranks{layout: "0,0,0", env: env, victims: []int{victim}, limit: timeout + 30*time.Second}.run(t)
}

// afterLine is the duration a rank printed on its "AFTER" line.
func afterLine(t *testing.T, out string) time.Duration {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "AFTER "); ok {
			d, err := time.ParseDuration(v)
			require.NoError(t, err, "%s", out)
			return d
		}
	}
	require.FailNow(t, "no AFTER line", "%s", out)
	return 0
}

// sameGPUFaultRank is one rank of the tests above (GONCCL_DEVTEST_SCRIPT=samegpu-fault,
// or samegpu-refused: set up, say whether it connected, and stop).
func sameGPUFaultRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	timeout, err := time.ParseDuration(os.Getenv("GONCCL_DEVTEST_TIMEOUT"))
	if err != nil {
		timeout = sameFaultTimeout
	}
	r, err := openRank(d, f, id, rank, devs, timeout)
	if err != nil {
		return err
	}
	defer r.c.Abort()
	c, dev, s, ctx := r.c, r.dev, r.s, r.ctx
	g, err := samegpu.NewSameGPU(d, ctx, rank, nranks, timeout, hostExchange(c))
	if os.Getenv("GONCCL_DEVTEST_SCRIPT") == "samegpu-refused" {
		switch {
		case errors.Is(err, samegpu.ErrRefused):
			fmt.Fprintf(log, "rank %d: REFUSED: %v\n", rank, err)
		case err != nil:
			return err
		default:
			fmt.Fprintf(log, "rank %d: CONNECTED\n", rank)
			g.Close()
		}
		return nil
	}
	if err != nil {
		return err
	}
	if os.Getenv("GONCCL_DEVTEST_NOWATCH") == "" {
		g.Watch(c.Err)
	}
	red, err := reducerFor(d, ctx)
	if err != nil {
		return err
	}
	const count = 1000
	buf := f.Malloc(dev, 4*count)
	ones := make([]float32, count)
	for i := range ones {
		ones[i] = 1
	}
	f.SetFloats(buf, ones)
	if err := g.AllReduce(s, red, buf, buf, count, core.Float32, core.Sum); err != nil {
		return fmt.Errorf("rank %d: the all_reduce every rank agrees on: %w", rank, err)
	}
	f.Drain(uintptr(s))
	if got := f.Floats(buf, 1)[0]; got != float32(nranks) {
		return fmt.Errorf("rank %d: the agreed all_reduce gave %v, want %d", rank, got, nranks)
	}
	fallIfVictim(rank, log)
	start := time.Now()
	err = g.AllReduce(s, red, buf, buf, count, core.Float32, core.Sum)
	if err == nil {
		f.Drain(uintptr(s))
		return fmt.Errorf("rank %d: the all_reduce without the victim returned no error", rank)
	}
	fmt.Fprintf(log, "ERROR: %v\nAFTER %v\n", err, time.Since(start))
	if err := g.AllReduce(s, red, buf, buf, count, core.Float32, core.Sum); err == nil {
		return fmt.Errorf("rank %d: an operation after the failure ran", rank)
	}
	fmt.Fprintln(log, "NEXT OP REFUSED")
	f.Drain(uintptr(s))
	fmt.Fprintf(log, "close: %v\n", g.Close())
	return nil
}

// fallIfVictim kills (GONCCL_DEVTEST_HOW unset or "kill") or stops ("stop") this
// process where rank is GONCCL_DEVTEST_VICTIM, after saying so in log; the parent
// kills a stopped one.
func fallIfVictim(rank int, log *os.File) {
	if victim, _ := strconv.Atoi(os.Getenv("GONCCL_DEVTEST_VICTIM")); rank == victim {
		sig := syscall.SIGKILL
		if os.Getenv("GONCCL_DEVTEST_HOW") == "stop" {
			sig = syscall.SIGSTOP
		}
		fmt.Fprintf(log, "victim: %v\n", sig)
		_ = syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Hour)
	}
}
