package core

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/internal/wiretest"
)

func TestReplyRoundTrip(t *testing.T) {
	table := make([]rankInfo, 300)
	for i := range table {
		table[i] = rankInfo{Rank: i, NRanks: len(table), Addr: fmt.Sprintf("10.0.%d.%d:%d", i/256, i%256, 40000+i),
			Host: fmt.Sprintf("boot-id-%d", i/8), Hostname: fmt.Sprintf("node%d", i/8), Pid: 1000 + i, PidNS: fmt.Sprintf("pid:[%d]", 4026531836+i%2), Shm: i%3 != 0,
			Epoch: 7, Opts: `algorithm "ring", chunk size 0`, SockThreads: 2, SocksPerThread: 4,
			DeadlineMs: 1_800_000_000_000 + int64(i), TimeoutMs: 600_000}
	}
	for _, want := range []rootReply{
		{Ranks: table},
		{Ranks: table[:1]},
		{Error: "timed out waiting for ranks [3] to join", Missing: "[3]"},
		{Ranks: []rankInfo{{Rank: 0, NRanks: 1, DeadlineMs: -5}}},
	} {
		got, err := readReply(wiretest.Feed(encodeReply(want)))
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	// The strings ranks share travel once: under a third of the table as JSON.
	js, err := json.Marshal(table)
	require.NoError(t, err)
	require.Less(t, 3*len(encodeReply(rootReply{Ranks: table})), len(js))
}

func TestReplyRefusesMalformed(t *testing.T) {
	good := encodeReply(rootReply{Ranks: []rankInfo{{Rank: 0, NRanks: 2, Addr: "a", Host: "h"}, {Rank: 1, NRanks: 2, Addr: "b", Host: "h"}}})
	body := good[4:]
	frame := func(b []byte) []byte {
		return append([]byte{byte(len(b)), byte(len(b) >> 8), 0, 0}, b...)
	}
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"other version": {append([]byte{9}, body[1:]...), "format 9"},
		"cut short":     {body[:len(body)-3], "cut short"},
		"left over":     {append(append([]byte(nil), body...), 0), "left over"},
		// 1<<20 ranks claimed by a few bytes: refused before anything is allocated.
		"huge count": {[]byte{replyVersion, 0, 0, 0x80, 0x80, 0x40, 0}, "rank count"},
		"bad string": {[]byte{replyVersion, 0, 0, 1, 0, 0, 1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, "address 5 is beyond 0"},
		"empty":      {nil, "cut short"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := readReply(wiretest.Feed(frame(tc.b)))
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "%v", err)
		})
	}
}
