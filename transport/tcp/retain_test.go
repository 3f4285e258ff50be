package tcp

import (
	"bytes"
	"io"
	"math/rand"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestKeptBytesAreNotCopied: a write kept by reference (a collective's send) costs no
// copy while the peer reads: settled after the peer has read it, nothing is copied,
// and the bytes the peer got are the writer's.
func TestKeptBytesAreNotCopied(t *testing.T) {
	dial, acc, _, _ := sessionPair(t, 5*time.Second, nil, nil)
	data := make([]byte, 8<<20)
	rand.New(rand.NewSource(3)).Read(data)
	got := make([]byte, len(data))
	read := make(chan error, 1)
	go func() {
		_ = acc.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := io.ReadFull(acc, got)
		if err == nil {
			_, err = acc.Write([]byte{1}) // the answer carries the acknowledgement
		}
		read <- err
	}()
	_, err := dial.WriteKept(nil, data)
	require.NoError(t, err)
	require.NoError(t, <-read)
	_ = dial.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadFull(dial, make([]byte, 1))
	require.NoError(t, err)
	require.NoError(t, dial.Settle(time.Now().Add(10*time.Second)))
	require.True(t, bytes.Equal(data, got))
	dial.mu.Lock()
	defer dial.mu.Unlock()
	require.Zero(t, dial.kept.referenced()+dial.kept.owned(), "acknowledged bytes are still kept")
}

// TestIdleSessionHoldsNothing: what a writer copied when it settled before the peer
// read it is let go once the peer has read it, though nobody reads the writer's side
// of the connection again (the link to a ring's next rank).
func TestIdleSessionHoldsNothing(t *testing.T) {
	dial, acc, _, _ := sessionPair(t, 5*time.Second, nil, nil)
	before, _ := RetainedBytes()
	data := make([]byte, 2<<20)
	_, err := dial.WriteKept(nil, data)
	require.NoError(t, err)
	require.NoError(t, dial.Settle(time.Now().Add(10*time.Second)))
	held, _ := RetainedBytes()
	require.Greater(t, held, before, "nothing was copied though the peer had read nothing")
	_ = acc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadFull(acc, make([]byte, len(data)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { now, _ := RetainedBytes(); return now == before }, 5*time.Second, 10*time.Millisecond,
		"an idle session still holds copies after the peer acknowledged them")
}

// TestBudgetHoldsWritersBack: past GONCCL_LINK_BUFFER_MB's budget a writer does not
// copy; it waits for the peer's acknowledgement, and fails at its deadline naming the
// setting while the peer does not read.
func TestBudgetHoldsWritersBack(t *testing.T) {
	old := retainBudget.limit.Load()
	SetRetainLimit(1 << 20)
	t.Cleanup(func() { SetRetainLimit(old) })
	dial, acc, _, _ := sessionPair(t, 5*time.Second, nil, nil)
	data := make([]byte, 3<<20)
	_, err := dial.WriteKept(nil, data)
	require.NoError(t, err)
	err = dial.Settle(time.Now().Add(300 * time.Millisecond))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.ErrorContains(t, err, "GONCCL_LINK_BUFFER_MB")
	go func() {
		_ = acc.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, _ = io.ReadFull(acc, make([]byte, len(data)))
	}()
	require.NoError(t, dial.Settle(time.Now().Add(10*time.Second)), "the acknowledgement did not release the writer")
	now, _ := RetainedBytes()
	require.LessOrEqual(t, now, int64(1<<20))
}

// TestEndedSessionsLeaveTheRegistry: a session that closed or failed is forgotten by
// its registry (a reconnect naming it is refused as unknown either way).
func TestEndedSessionsLeaveTheRegistry(t *testing.T) {
	dial, acc, r0, r1 := sessionPair(t, 5*time.Second, nil, nil)
	require.Equal(t, 1, r1.reg.Len())
	require.NoError(t, dial.Close())
	_ = acc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := acc.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Eventually(t, func() bool { return r0.reg.Len() == 0 && r1.reg.Len() == 0 }, 5*time.Second, 10*time.Millisecond)
}
