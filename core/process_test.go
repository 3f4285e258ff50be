package core

import (
	"encoding/hex"
	"fmt"
	"os"
	osexec "os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/transport"
)

// Ranks in other processes: the test binary re-runs itself as rank GONCCL_TEST_RANK
// of the communicator whose unique id is in GONCCL_TEST_ID.
func TestMain(m *testing.M) {
	if r := os.Getenv("GONCCL_TEST_RANK"); r != "" {
		os.Exit(childRank(r))
	}
	os.Exit(m.Run())
}

const childCount = 300001 // float32s per all_reduce: more than a shm ring

// childRank joins, runs GONCCL_TEST_OPS all_reduces (checking nothing: rank 0 checks
// the results), stays up for GONCCL_TEST_IDLE (a duration) if set, and then, if
// GONCCL_TEST_DIE is set, kills itself without closing anything, as a crashing rank
// would. With GONCCL_TEST_DIE_DIALING=P it kills itself instead as soon as it has
// dialled the first connection of its link to rank P, if that link is made on demand.
func childRank(r string) int {
	rank, _ := strconv.Atoi(r)
	n, _ := strconv.Atoi(os.Getenv("GONCCL_TEST_NRANKS"))
	ops, _ := strconv.Atoi(os.Getenv("GONCCL_TEST_OPS"))
	var id UniqueID
	b, err := hex.DecodeString(os.Getenv("GONCCL_TEST_ID"))
	if err != nil || len(b) != len(id) {
		return 2
	}
	copy(id[:], b)
	// Installed before init, not after: rank 0 may ask for the link as soon as its own
	// init returns, before this rank's has.
	opts := Options{Timeout: 20 * time.Second}
	if p := os.Getenv("GONCCL_TEST_DIE_DIALING"); p != "" { // on demand only: an initial peer links as usual
		peer, _ := strconv.Atoi(p)
		initial := slices.Contains(initialPeers(rank, n), peer)
		hook := func(_, to int, _ uint8) { // the first connection of the link, then death
			if to == peer && !initial {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}
		}
		opts.test = &testHooks{dialed: hook}
	}
	c, err := NewComm(id, n, rank, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	for i := 0; i < ops; i++ {
		buf := inputs(Float32, Sum, childCount, rank, int64(i))
		req, err := c.AllReduce(buf, buf, childCount, Float32, Sum)
		if err == nil {
			_, err = req.Wait(-1)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 4
		}
	}
	if s := os.Getenv("GONCCL_TEST_IDLE"); s != "" { // stay up for rank 0 (the test kills us)
		d, _ := time.ParseDuration(s)
		time.Sleep(d)
	}
	if os.Getenv("GONCCL_TEST_DIE") != "" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if err := c.Destroy(); err != nil {
		return 5
	}
	return 0
}

// spawnRanks starts ranks 1..n-1 as child processes and returns rank 0's communicator.
func spawnRanks(t *testing.T, n, ops int, die bool) (*Comm, []*osexec.Cmd) {
	t.Helper()
	var env []string
	if die {
		env = append(env, "GONCCL_TEST_DIE=1")
	}
	return spawnRanksWith(t, n, ops, env, 20*time.Second)
}

// spawnRanksWith is spawnRanks with more environment for the children and rank 0's
// timeout.
func spawnRanksWith(t *testing.T, n, ops int, env []string, timeout time.Duration) (*Comm, []*osexec.Cmd) {
	t.Helper()
	id, err := NewUniqueID()
	require.NoError(t, err)
	var cmds []*osexec.Cmd
	for r := 1; r < n; r++ {
		cmd := osexec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "GONCCL_TEST_RANK="+strconv.Itoa(r), "GONCCL_TEST_NRANKS="+strconv.Itoa(n),
			"GONCCL_TEST_OPS="+strconv.Itoa(ops), "GONCCL_TEST_ID="+hex.EncodeToString(id[:]))
		cmd.Env = append(cmd.Env, env...)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		cmds = append(cmds, cmd)
	}
	c, err := NewComm(id, n, 0, Options{Timeout: timeout})
	require.NoError(t, err)
	return c, cmds
}

func allReduceAt0(c *Comm, n, i int) ([]byte, []byte, error) {
	buf := inputs(Float32, Sum, childCount, 0, int64(i))
	ins := [][]byte{append([]byte{}, buf...)}
	for r := 1; r < n; r++ {
		ins = append(ins, inputs(Float32, Sum, childCount, r, int64(i)))
	}
	req, err := c.AllReduce(buf, buf, childCount, Float32, Sum)
	if err == nil {
		_, err = req.Wait(-1)
	}
	return reference(Float32, Sum, ins, childCount), buf, err
}

// Ranks in separate processes on one host map each other's segments through /proc
// and reduce correctly over them.
func TestShmAcrossProcesses(t *testing.T) {
	n, ops := 3, 3
	c, cmds := spawnRanks(t, n, ops, false)
	for p := 1; p < n; p++ {
		require.Equal(t, "shm", transportName(c.peers.linkIfAny(p)), "peer %d", p)
	}
	for i := 0; i < ops; i++ {
		want, got, err := allReduceAt0(c, n, i)
		require.NoError(t, err)
		require.Equal(t, want, got, "all_reduce %d", i)
	}
	require.NoError(t, c.Destroy())
	for _, cmd := range cmds {
		require.NoError(t, cmd.Wait())
	}
}

// A rank that dies (killed: it closes nothing) fails its peers' operation promptly,
// through the liveness connection, not at the deadline.
func TestShmPeerProcessDeath(t *testing.T) {
	c, _ := spawnRanks(t, 2, 1, true)
	defer c.Abort()
	_, _, err := allReduceAt0(c, 2, 0)
	require.NoError(t, err)
	start := time.Now()
	_, _, err = allReduceAt0(c, 2, 1) // rank 1 is dead or dying
	require.ErrorIs(t, err, transport.ErrPeerClosed)
	require.ErrorContains(t, err, "lost rank 1")
	require.Less(t, time.Since(start), 10*time.Second)
}
