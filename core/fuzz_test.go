package core

import (
	"encoding/binary"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gonccl/gonccl/internal/wiretest"
	"github.com/gonccl/gonccl/transport"
)

func bootstrapFrame(v any) []byte {
	b, _ := json.Marshal(v)
	return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// FuzzBootstrapMsg feeds arbitrary bytes to the bootstrap message readers, as the root
// reads a rank's announcement (JSON) and a rank reads the root's table (binary), and runs the checks
// each applies: no panic, no allocation beyond what arrived, and whatever passes the
// checks is in range.
func FuzzBootstrapMsg(f *testing.F) {
	me := rankInfo{Rank: 1, NRanks: 2, Addr: "127.0.0.1:4000", Host: "h", Hostname: "h", Pid: 7, Shm: true}
	f.Add(bootstrapFrame(me))
	f.Add(encodeReply(rootReply{Ranks: []rankInfo{{Rank: 0, NRanks: 2}, me}}))
	f.Add(encodeReply(rootReply{Error: "rank 3 joined twice"}))
	f.Add(bootstrapFrame(rankInfo{Rank: 0, NRanks: 1 << 40}))
	f.Add(bootstrapFrame(me)[:9])                     // truncated
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f, '{', '}'})   // huge length, little data
	f.Add(append([]byte{4, 0, 0, 0}, "nope"...))      // not JSON
	f.Add(bootstrapFrame(map[string]any{"ranks": 5})) // wrong shape
	f.Fuzz(func(t *testing.T, data []byte) {
		var info rankInfo
		if readMsg(wiretest.Feed(data), &info) == nil {
			if checkJoin(info, -1, map[int]bool{}) == nil {
				if info.NRanks < 1 || info.NRanks > MaxRanks || info.Rank < 0 || info.Rank >= info.NRanks {
					t.Fatalf("checkJoin accepted %+v", info)
				}
				_ = missingRanks(info.NRanks, map[int]bool{info.Rank: true})
			}
		}
		if reply, err := readReply(wiretest.Feed(data)); err == nil && checkReply(&reply, 2) == nil {
			for i, ri := range reply.Ranks {
				if ri.Rank != i {
					t.Fatalf("checkReply accepted %+v", reply)
				}
			}
		}
	})
}

func wireMsg(h transport.MsgHeader, p []byte) []byte {
	b := make([]byte, transport.MsgHeaderSize+len(p))
	transport.EncodeMsgHeader(b, &h)
	copy(b[transport.MsgHeaderSize:], p)
	return b
}

// FuzzP2PReader feeds arbitrary bytes, as rank 1's point-to-point channel, to rank 0's
// reader while rank 0 has an eager and a rendezvous receive posted. The reader must
// fail the channel (not panic), finish every request, and hold at most as many bytes
// of unexpected messages as arrived.
func FuzzP2PReader(f *testing.F) {
	eager := wireMsg(transport.MsgHeader{Kind: transport.MsgEager, DType: 1, Seq: 1, Tag: 5, Len: 8}, make([]byte, 8))
	rts := wireMsg(transport.MsgHeader{Kind: transport.MsgRTS, DType: 1, Seq: 2, Tag: 6, Len: 100 << 10}, nil)
	data := wireMsg(transport.MsgHeader{Kind: transport.MsgData, Seq: 2, Len: 100 << 10}, nil)
	f.Add(eager)
	f.Add(append(append([]byte(nil), eager...), rts...))
	f.Add(append(append([]byte(nil), rts...), data...))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgEager, Seq: 1, Tag: 9, Len: 1 << 40}, nil))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgData, Seq: 77, Len: 1 << 40}, nil))
	f.Add(append(wireMsg(transport.MsgHeader{Kind: transport.MsgEager, Seq: 3, Tag: 1, Len: 2}, []byte{1, 2}),
		wireMsg(transport.MsgHeader{Kind: transport.MsgEager, Seq: 3, Tag: 1, Len: 2}, []byte{1, 2})...)) // replayed seq
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgNack, Seq: 4, Len: 3}, nil))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgCancel, Seq: 2}, nil))
	f.Add(eager[:20])
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgStatusQuery, Seq: 3}, nil))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgStatus, Seq: 3, Len: 1 << 40}, nil))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgStatus, Seq: 3, Len: 4}, []byte("{\"a\"")))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgBye, Len: 5}, []byte("bye!!")))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgHeartbeat}, nil))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgLost, Tag: 0, Len: 4}, []byte("dead")))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgLost, Tag: 7, Seq: 3, Len: 4}, []byte("dead")))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgFailed, Tag: 1, Seq: 1, Len: 4}, []byte("diff")))
	f.Add(wireMsg(transport.MsgHeader{Kind: transport.MsgFailed, Tag: 0, Seq: 9, Len: 4}, []byte("diff")))
	f.Fuzz(func(t *testing.T, in []byte) {
		c := &Comm{rank: 0, nranks: 2, timeout: 2 * time.Second, logs: loggers{net: zap.NewNop()},
			peers: fixedPeers(0, make([]transport.Link, 2))}
		c.startP2P([]*transport.MsgConn{nil, transport.NewMsgConn(1, wiretest.Feed(in))})
		e := c.p2p
		// A receive posted after the reader already failed the channel fails at once.
		var reqs []*Request
		for _, n := range []int{8, 100 << 10} {
			if r, err := c.Recv(make([]byte, n), n, Uint8, 1, int(5+n/(100<<10))); err == nil {
				reqs = append(reqs, r)
			}
		}
		// The feed ends with EOF, so the reader fails the channel and both goroutines end.
		done := make(chan struct{})
		go func() { e.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("reader still running 5 s after its input ended")
		}
		e.mu.Lock()
		held := 0
		for _, u := range e.unexpected {
			held += len(u.payload)
		}
		e.mu.Unlock()
		if held > len(in) {
			t.Fatalf("holding %d bytes of unexpected messages from %d bytes of input", held, len(in))
		}
		e.close(ErrClosed, "fuzz")
		for i, r := range reqs {
			// 10 s: a receive close never ends is what this looks for; 1 s was missed
			// once on a loaded CI machine by an input that ends at once when rerun
			// (testdata/fuzz/FuzzP2PReader/ebe7f98cc77b6553, kept).
			if ok, _ := r.Wait(10 * time.Second); !ok {
				t.Fatalf("receive %d of %d is still pending after close", i, len(reqs))
			}
		}
	})
}
