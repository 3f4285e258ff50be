package core

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/tcp"
)

// initEpochs creates an n-rank communicator over real sockets in which rank r
// announces epochs[r], and returns each rank's communicator or error.
func initEpochs(t *testing.T, id UniqueID, epochs []uint32, timeout time.Duration, hooks *testHooks) ([]*Comm, []error) {
	t.Helper()
	n := len(epochs)
	comms, errs := make([]*Comm, n), make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, n, r, Options{Timeout: timeout, Epoch: epochs[r], test: hooks})
		}()
	}
	wg.Wait()
	return comms, errs
}

// A late frame of an older generation, injected on a live link ahead of an operation,
// is dropped, logged and counted; the operation after it is exact. Over shm and over
// TCP links.
func TestStaleFrameIsDroppedAndLogged(t *testing.T) {
	for _, shm := range []string{"0", "1"} {
		t.Run("shm_disable="+shm, func(t *testing.T) {
			t.Setenv("GONCCL_SHM_DISABLE", shm)
			obsCore, logs := observer.New(zapcore.WarnLevel)
			id, err := NewUniqueID()
			require.NoError(t, err)
			const n = 3
			comms, errs := initEpochs(t, id, []uint32{5, 5, 5}, 20*time.Second, &testHooks{logTee: obsCore})
			for r := range errs {
				require.NoError(t, errs[r], "rank %d", r)
			}
			defer destroyAll(t, comms)
			require.Equal(t, uint32(5), comms[0].Epoch())

			// Rank 1 sends rank 0 a frame that looks like the next all_reduce's, but
			// of generation 4, with a payload that would spoil the sum.
			count := 4099
			junk := make([]byte, count*4)
			for i := range junk {
				junk[i] = 0x7f
			}
			for peer := range n {
				if peer == 1 {
					continue
				}
				h := transport.Header{Seq: 1, Kind: uint8(KindAllReduce), DType: uint8(Float32), Root: -1,
					Count: uint64(count), Epoch: 4}
				require.NoError(t, comms[1].peers.linkIfAny(peer).Send(&h, junk, time.Now().Add(5*time.Second)))
			}

			opErrs, outs, want := allReduceFloat32(t, comms, count, 11)
			for r, err := range opErrs {
				require.NoError(t, err, "rank %d", r)
			}
			for r := range outs {
				require.Equal(t, want, outs[r], "rank %d", r)
			}
			// Whether a rank read the stale frame depends on the algorithm (a ring
			// reads from one neighbour only): it is dropped by whoever reads it, and
			// read by nobody else.
			var dropped uint64
			for _, c := range comms {
				dropped += c.StaleFrames()
			}
			require.GreaterOrEqual(t, dropped, uint64(1))
			var lines []string
			for _, e := range logs.All() {
				if strings.Contains(e.Message, "of generation (epoch) 4 from rank 1") {
					lines = append(lines, e.Message)
				}
			}
			require.Len(t, lines, int(dropped), "one WARN line per dropped frame")
			require.Contains(t, lines[0], "this communicator is epoch 5")
		})
	}
}

// The bootstrap root refuses a rank that joins with another generation's epoch.
func TestRootRefusesAnotherEpoch(t *testing.T) {
	id, err := NewUniqueID()
	require.NoError(t, err)
	comms, errs := initEpochs(t, id, []uint32{3, 2}, 3*time.Second, nil)
	failed := 0
	for r, err := range errs {
		if err != nil {
			failed++
			continue
		}
		require.NoError(t, comms[r].Abort())
	}
	require.GreaterOrEqual(t, failed, 1)
	msgs := ""
	for _, err := range errs {
		if err != nil {
			msgs += err.Error() + "\n"
		}
	}
	require.Contains(t, msgs, "earlier ranks joined epoch")
}

// A rank of another generation that knows the secret and dials a rank's peer listener
// is turned away at the handshake and logged; the communicator forms without it.
func TestHandshakeRefusesAnotherEpoch(t *testing.T) {
	obsCore, logs := observer.New(zapcore.WarnLevel)
	id, err := NewUniqueID()
	require.NoError(t, err)
	dialed := make(chan error, 1)
	meshListening := func(rank int, addr string) {
		if rank == 0 {
			go func() {
				c, err := tcp.Dial(addr, id.secret(), nil, tcp.Hello{From: 1, To: 0, Channel: tcp.ChannelColl, Epoch: 8}, time.Now().Add(5*time.Second))
				if err == nil {
					c.Close()
				}
				dialed <- err
			}()
		}
	}
	comms, errs := initEpochs(t, id, []uint32{9, 9}, 20*time.Second, &testHooks{logTee: obsCore, meshListening: meshListening})
	for r := range errs {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer destroyAll(t, comms)
	select {
	case <-dialed:
	case <-time.After(20 * time.Second):
		t.Fatal("the stale dialer never finished")
	}
	require.Eventually(t, func() bool {
		for _, e := range logs.All() {
			if s, ok := e.ContextMap()["error"].(string); ok && strings.Contains(s, "generation (epoch) 8, this one is epoch 9") {
				return true
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
	bufs := [][]byte{make([]byte, 4), make([]byte, 4)}
	for r, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
		return c.AllReduce(bufs[c.rank], bufs[c.rank], 1, Float32, Sum)
	}) {
		require.NoError(t, err, "rank %d", r)
	}
}

// GONCCL_TEST_INJECT_STALE (the hook the Python reconfigure test uses): every rank of an
// epoch-2 communicator sends its peers an epoch-1 frame before the first all_reduce,
// which stays exact; the frames are dropped, not mixed in. An epoch-0 communicator
// sends none (there is no older generation).
func TestInjectStaleHook(t *testing.T) {
	t.Setenv("GONCCL_TEST_INJECT_STALE", "4099")
	for _, epoch := range []uint32{0, 2} {
		id, err := NewUniqueID()
		require.NoError(t, err)
		const n, count = 3, 4099
		comms, errs := initEpochs(t, id, []uint32{epoch, epoch, epoch}, 20*time.Second, nil)
		for r := range errs {
			require.NoError(t, errs[r], "rank %d", r)
		}
		opErrs, outs, want := allReduceFloat32(t, comms, count, 3)
		for r, err := range opErrs {
			require.NoError(t, err, "rank %d", r)
		}
		var dropped uint64
		for r, c := range comms {
			require.Equal(t, want, outs[r], "epoch %d rank %d", epoch, r)
			dropped += c.StaleFrames()
		}
		if epoch == 0 {
			require.Zero(t, dropped)
		} else {
			require.GreaterOrEqual(t, dropped, uint64(1))
		}
		destroyAll(t, comms)
	}
}
