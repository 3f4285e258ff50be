package core

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A peer whose process ends while nothing is pending (a script's normal end without
// destroying its group: ddp_example.py's) is logged at INFO, not WARN: a clean run
// prints no WARN. While an operation waits on it, its end is a failure and a WARN.
func TestPeerEndingIdleIsNotAWarning(t *testing.T) {
	for _, inFlight := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "in_flight"}[inFlight], func(t *testing.T) {
			obsCore, logs := observer.New(zapcore.InfoLevel)
			id, err := NewUniqueID()
			require.NoError(t, err)
			comms, errs := initEpochs(t, id, []uint32{0, 0}, 20*time.Second, &testHooks{logTee: obsCore})
			for r := range errs {
				require.NoError(t, errs[r], "rank %d", r)
			}
			bufs := [][]byte{make([]byte, 64), make([]byte, 64)}
			for _, err := range onAll(t, comms, func(c *Comm) (*Request, error) {
				return c.AllReduce(bufs[c.rank], bufs[c.rank], 16, Float32, Sum)
			}) {
				require.NoError(t, err)
			}
			var pending *Request
			if inFlight {
				pending, err = comms[0].AllReduce(bufs[0], bufs[0], 16, Float32, Sum)
				require.NoError(t, err)
				time.Sleep(50 * time.Millisecond) // it is running, waiting on rank 1
			}
			die(comms[1])
			require.Eventually(t, func() bool {
				return logs.FilterMessageSnippet("receive from rank 1").Len() > 0
			}, 10*time.Second, 10*time.Millisecond, "rank 0 never logged rank 1's end")
			about := func(level zapcore.Level) []string {
				var out []string
				for _, e := range logs.FilterMessageSnippet("receive from rank 1").All() {
					if e.Level == level {
						out = append(out, e.Message)
					}
				}
				return out
			}
			if inFlight {
				require.NotEmpty(t, about(zapcore.WarnLevel), "a peer lost mid-operation is a WARN")
				_, werr := pending.Wait(10 * time.Second)
				require.Error(t, werr, "the operation waiting on the lost rank failed")
			} else {
				require.Empty(t, about(zapcore.WarnLevel), "a peer that ended while idle was logged as a WARN")
				info := strings.Join(about(zapcore.InfoLevel), "\n")
				require.Contains(t, info, "rank 1 closed its connection with no operation pending")
			}
			for _, c := range comms {
				_ = c.Abort()
			}
		})
	}
}
