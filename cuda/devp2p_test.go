package cuda_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/core"
	"github.com/gonccl/gonccl/cuda"
	"github.com/gonccl/gonccl/cuda/cudatest"
	"github.com/gonccl/gonccl/cuda/driver"
)

// Point-to-point, alltoallv and barrier on the device path against the fake driver:
// the ranks in separate processes (runDevRanks with GONCCL_DEVTEST_SCRIPT=p2p) and
// as goroutines of one process. Every message is checked byte for byte against the
// sender's input (regenerated from its seed on the receiver), with guard bytes after
// it; alltoallv against core's host AlltoAllv. The scratch is 4096 bytes, so the
// slots are 256-512 bytes and most messages take many chunks.

var p2pLayouts = []string{"0", "0,0", "0,1", "0,0,1", "0,0,0,0", "0,1,2,3"}

func TestDeviceP2PAcrossProcesses(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "p2p")
	requireLayoutsPass(t, p2pLayouts...)
}

// TestDeviceP2PWrongStepFails shows the checks catch a point-to-point step done
// wrong: a receive that does not wait for the sender's flag, one that reads the slot
// one byte early, a send that overwrites a slot its receiver has not drained.
func TestDeviceP2PWrongStepFails(t *testing.T) {
	open(t)
	t.Setenv("GONCCL_DEVTEST_SCRIPT", "p2p")
	requireFaultsCaught(t, "0,0,1", "300,3000", "p2p-skip-sent-wait", "p2p-offset", "p2p-skip-free-wait")
}

func TestDeviceP2PRanksOfOneProcess(t *testing.T) {
	d, f := open(t)
	id, err := core.NewUniqueID()
	require.NoError(t, err)
	devs := oneContextSafe(f, []int{0, 1, 0})
	inProcessRanks(t, len(devs), func(r int) error { return devP2PRank(d, f, id, r, devs, os.Stderr) })
}

// p2pMsg is one message of a case: bytes from rank from to rank to.
type p2pMsg struct{ from, to, bytes int }

// p2pCase is one step of the script: its messages, issued by each rank in list
// order, either as one group (one P2P call) or one P2P call per operation; with
// split, sends go on one stream and receives on the other.
type p2pCase struct {
	name         string
	msgs         []p2pMsg
	group, split bool
	recvFirst    bool // odd ranks issue their receives before their sends
	later        bool // each operation alone, asynchronous (P2PLater), every rank receiving first
	// mixed: the first half of the messages as in later, then the second half (to the
	// same peers) in one group enqueued on the GPU's order (P2P) at once: it must come
	// after the async ones of its pairs.
	mixed bool
}

func p2pCases(n int) []p2pCase {
	var cs []p2pCase
	for _, size := range []int{0, 1, 7, 1000, 12000} {
		var ex []p2pMsg
		for a := 0; a+1 < n; a += 2 {
			ex = append(ex, p2pMsg{a, a + 1, size}, p2pMsg{a + 1, a, size + 3})
		}
		cs = append(cs, p2pCase{name: fmt.Sprintf("exchange %d", size), msgs: ex, group: true})
		cs = append(cs, p2pCase{name: fmt.Sprintf("exchange recv-first %d", size), msgs: ex, group: true, recvFirst: true})
		var ring []p2pMsg
		for r := range n {
			ring = append(ring, p2pMsg{r, (r + 1) % n, size + r})
		}
		cs = append(cs, p2pCase{name: fmt.Sprintf("ring %d", size), msgs: ring, group: true, split: size%2 == 0})
		if size > 0 {
			cs = append(cs, p2pCase{name: fmt.Sprintf("async ring %d", size), msgs: ring, later: true, split: true})
		}
		if size >= 1000 {
			twice := append(append([]p2pMsg{}, ring...), ring...)
			cs = append(cs, p2pCase{name: fmt.Sprintf("async then grouped ring %d", size), msgs: twice, later: true, mixed: true, split: true})
		}
	}
	var multi []p2pMsg
	for r := range n {
		multi = append(multi, p2pMsg{r, (r + 1) % n, 700}, p2pMsg{r, r, 2000}, p2pMsg{r, (r + 1) % n, 9000},
			p2pMsg{r, (r + n - 1) % n, 333})
	}
	cs = append(cs, p2pCase{name: "multi", msgs: multi, group: true}, p2pCase{name: "multi split", msgs: multi, group: true, split: true})
	// Ungrouped: each operation is its own P2P call; every send fits in the slots in
	// flight, or its receiver does nothing else.
	var fan []p2pMsg
	for q := 1; q < n; q++ {
		fan = append(fan, p2pMsg{0, q, 300})
	}
	for q := 1; q < n; q++ {
		fan = append(fan, p2pMsg{q, 0, 200 + q})
	}
	if n > 1 {
		for range 5 {
			fan = append(fan, p2pMsg{0, 1, 100})
		}
		fan = append(fan, p2pMsg{1, 0, 20000})
	}
	cs = append(cs, p2pCase{name: "ungrouped", msgs: fan})
	return cs
}

// p2pPayload is message k of case i: the same bytes on sender and receiver.
func p2pPayload(i, k, n int) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), uint64(k)))
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(rng.Uint32())
	}
	return b
}

const p2pGuard = 64

// devP2PRank runs the point-to-point script as rank rank of devs, then the alltoallv
// cases, and reports every message that differs.
func devP2PRank(d *driver.Driver, f *cudatest.Fake, id core.UniqueID, rank int, devs []int, log *os.File) error {
	nranks := len(devs)
	c, err := core.NewComm(id, nranks, rank, core.Options{Timeout: 60 * time.Second})
	if err != nil {
		return err
	}
	defer c.Destroy()
	dev := devs[rank]
	streams := []driver.Stream{driver.Stream(f.Stream(dev)), driver.Stream(f.Stream(dev))}
	ctx, err := d.StreamContext(streams[0])
	if err != nil {
		return err
	}
	sh, err := cuda.NewShared(d, ctx, rank, nranks, devScratch, hostExchange(c))
	if err != nil {
		return err
	}
	// Watched as capi watches it: nothing here may look like a failure to the watcher.
	sh.Watch(cuda.WatchConfig{Timeout: c.Timeout, Err: c.Err, Fail: c.FailDevice})
	var bad []string
	for i, pc := range p2pCases(nranks) {
		msgs, err := runP2PCase(sh, f, dev, streams, rank, i, pc)
		if err != nil {
			return fmt.Errorf("case %s: %w", pc.name, err)
		}
		bad = append(bad, msgs...)
	}
	for i := range 4 {
		got, want, err := runAlltoAllvCase(c, sh, f, dev, streams[i%2], rank, nranks, i)
		if err != nil {
			return fmt.Errorf("alltoallv %d: %w", i, err)
		}
		if !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("MISMATCH alltoallv %d (%s)", i, devFirstDiff(got, want)))
		}
	}
	if err := sh.Err(); err != nil {
		return fmt.Errorf("the watcher gave up: %w", err)
	}
	if err := sh.Close(time.Minute); err != nil {
		return err
	}
	if n := f.Counters().BadAccess; n != 0 {
		bad = append(bad, fmt.Sprintf("%d bad accesses", n))
	}
	if len(bad) > 0 {
		fmt.Fprintln(log, strings.Join(bad, "\n"))
		return fmt.Errorf("rank %d: %d message(s) wrong", rank, len(bad))
	}
	return nil
}

// runP2PCase issues this rank's part of case pc and checks what it received.
func runP2PCase(sh *cuda.Shared, f *cudatest.Fake, dev int, streams []driver.Stream, rank, i int, pc p2pCase) ([]string, error) {
	type recv struct {
		k, bytes int
		buf      uintptr
	}
	var sends, recvs []cuda.P2POp
	var checks []recv
	for k, m := range pc.msgs {
		if m.from == rank {
			buf := f.Malloc(dev, max(m.bytes, 1))
			f.Write(buf, p2pPayload(i, k, m.bytes))
			sends = append(sends, cuda.P2POp{Peer: m.to, Buf: buf, Bytes: m.bytes, Stream: streams[0]})
		}
		if m.to == rank {
			buf := f.Malloc(dev, m.bytes+p2pGuard)
			f.Write(buf, bytes.Repeat([]byte{0xEE}, m.bytes+p2pGuard))
			st := streams[0]
			if pc.split {
				st = streams[1]
			}
			recvs = append(recvs, cuda.P2POp{Recv: true, Peer: m.from, Buf: buf, Bytes: m.bytes, Stream: st})
			checks = append(checks, recv{k, m.bytes, buf})
		}
	}
	ops := append(append([]cuda.P2POp{}, sends...), recvs...)
	if pc.recvFirst && rank%2 == 1 {
		ops = append(append([]cuda.P2POp{}, recvs...), sends...)
	}
	var grouped []cuda.P2POp
	if pc.mixed {
		// The second message of each pair: sends on streams[0], receives moved there too.
		grouped = append(append([]cuda.P2POp{}, sends[len(sends)/2:]...), recvs[len(recvs)/2:]...)
		for i := range grouped {
			grouped[i].Stream = streams[0]
		}
		sends, recvs = sends[:len(sends)/2], recvs[:len(recvs)/2]
	}
	if pc.later {
		// As goncclRecvAsync then goncclSendAsync: receives first, on every rank.
		ops = append(append([]cuda.P2POp{}, recvs...), sends...)
		done := make(chan error, len(ops))
		for _, op := range ops {
			if err := sh.P2PLater(op, func(err error) { done <- err }); err != nil {
				return nil, err
			}
		}
		if len(grouped) > 0 {
			if err := sh.P2P(grouped); err != nil {
				return nil, err
			}
		}
		for range ops {
			select {
			case err := <-done:
				if err != nil {
					return nil, err
				}
			case <-time.After(time.Minute):
				return nil, fmt.Errorf("an async operation was not enqueued within a minute")
			}
		}
	} else if !pc.group {
		// In the list's order, each operation alone.
		ops = ops[:0]
		si, ri := 0, 0
		for _, m := range pc.msgs {
			if m.from == rank {
				ops = append(ops, sends[si])
				si++
			}
			if m.to == rank {
				ops = append(ops, recvs[ri])
				ri++
			}
		}
		for _, op := range ops {
			if err := sh.P2P([]cuda.P2POp{op}); err != nil {
				return nil, err
			}
		}
	} else if err := sh.P2P(ops); err != nil {
		return nil, err
	}
	for _, s := range streams {
		f.Drain(uintptr(s))
	}
	var bad []string
	for _, r := range checks {
		want := append(p2pPayload(i, r.k, r.bytes), bytes.Repeat([]byte{0xEE}, p2pGuard)...)
		if got := f.Read(r.buf, r.bytes+p2pGuard); !bytes.Equal(got, want) {
			bad = append(bad, fmt.Sprintf("MISMATCH %s: message %d (%d bytes from rank %d) on rank %d: %s",
				pc.name, r.k, r.bytes, pc.msgs[r.k].from, rank, devFirstDiff(got, want)))
		}
	}
	return bad, nil
}

// runAlltoAllvCase runs an alltoallv of float32 blocks of uneven sizes (some empty,
// the displacements leaving gaps) on the device path and with core's host AlltoAllv.
func runAlltoAllvCase(c *core.Comm, sh *cuda.Shared, f *cudatest.Fake, dev int, s driver.Stream, rank, nranks, i int) (got, want []byte, err error) {
	count := func(p, q int) int { return (p*3 + q*5 + i) % 7 * 113 * (1 + i%2) }
	const es, gap = 4, 3
	sc, sd, rc, rd := make([]int, nranks), make([]int, nranks), make([]int, nranks), make([]int, nranks)
	sendN, recvN := 0, 0
	for p := range nranks {
		sc[p], sd[p] = count(rank, p), sendN
		sendN += sc[p] + gap
		rc[p], rd[p] = count(p, rank), recvN
		recvN += rc[p] + gap
	}
	in := devInput(core.Float32, core.Sum, sendN, rank, 1000+i)
	want = bytes.Repeat([]byte{0xEE}, recvN*es)
	req, err := c.AlltoAllv(in, sc, sd, want, rc, rd, core.Float32)
	if err == nil {
		_, err = req.Wait(-1)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("host reference: %w", err)
	}
	send, recv := f.Malloc(dev, max(sendN*es, 1)), f.Malloc(dev, max(recvN*es, 1))
	f.Write(send, in)
	f.Write(recv, bytes.Repeat([]byte{0xEE}, recvN*es))
	scale := func(a []int) []int {
		out := make([]int, len(a))
		for j, v := range a {
			out[j] = v * es
		}
		return out
	}
	if err := sh.AlltoAllv(s, send, scale(sc), scale(sd), recv, scale(rc), scale(rd)); err != nil {
		return nil, nil, err
	}
	f.Drain(uintptr(s))
	return f.Read(recv, recvN*es), want, nil
}
