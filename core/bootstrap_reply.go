package core

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
)

// The root's answer travels in a compact binary form, not JSON: every rank decodes
// the whole table, and at 256 ranks on one host decoding it as JSON was the largest
// share of init's CPU time (each process parsed ~40 KB with reflection while 255
// others waited for the same cores). The strings most ranks share (host identity,
// hostname, options) are sent once, in a string table, and referred to by index.
//
//	reply   = version(1) error missing nranks nstrings string* rank*
//	string  = uvarint length, bytes
//	rank    = uvarint rank, nranks, addr#, host#, hostname#, opts#, pid, shm(0|1),
//	          epoch, sock_threads, socks_per_thread; varint deadline_ms, timeout_ms
//
// error and missing are strings; # marks an index into the string table.

// replyVersion is the reply format's first byte; a rank that reads another refuses
// the answer with a message naming a version mismatch between ranks.
const replyVersion = 2

// minRankBytes is the fewest bytes one rank of the table takes: 13 one-byte fields.
// The decoder bounds the rank count by the bytes that arrived before allocating.
const minRankBytes = 13

// encodeReply frames r as readReply reads it.
func encodeReply(r rootReply) []byte {
	var strs []string
	index := map[string]uint64{}
	ref := func(s string) uint64 {
		i, ok := index[s]
		if !ok {
			i = uint64(len(strs))
			index[s] = i
			strs = append(strs, s)
		}
		return i
	}
	type refs struct{ addr, host, hostname, opts, pidns uint64 }
	rs := make([]refs, len(r.Ranks))
	for i, ri := range r.Ranks {
		rs[i] = refs{ref(ri.Addr), ref(ri.Host), ref(ri.Hostname), ref(ri.Opts), ref(ri.PidNS)}
	}
	b := make([]byte, 4, 64+len(r.Ranks)*48)
	b = append(b, replyVersion)
	b = appendString(b, r.Error)
	b = appendString(b, r.Missing)
	b = binary.AppendUvarint(b, uint64(len(r.Ranks)))
	b = binary.AppendUvarint(b, uint64(len(strs)))
	for _, s := range strs {
		b = appendString(b, s)
	}
	for i, ri := range r.Ranks {
		for _, v := range []uint64{uint64(ri.Rank), uint64(ri.NRanks), rs[i].addr, rs[i].host, rs[i].hostname, rs[i].opts,
			uint64(ri.Pid), rs[i].pidns, boolByte(ri.Shm), uint64(ri.Epoch), uint64(ri.SockThreads), uint64(ri.SocksPerThread)} {
			b = binary.AppendUvarint(b, v)
		}
		b = binary.AppendVarint(b, ri.DeadlineMs)
		b = binary.AppendVarint(b, ri.TimeoutMs)
	}
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func boolByte(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}

// readReply reads one framed answer of the root from c.
func readReply(c net.Conn) (rootReply, error) {
	b, err := readFrame(c)
	if err != nil {
		return rootReply{}, err
	}
	r, err := decodeReply(b)
	if err != nil {
		return rootReply{}, fmt.Errorf("malformed bootstrap answer: %w", err)
	}
	return r, nil
}

// replyReader walks an encoded answer; the first error sticks and every later read
// returns zero.
type replyReader struct {
	b   []byte
	err error
}

var errReplyShort = errors.New("cut short")

func (d *replyReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errReplyShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *replyReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errReplyShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

// int reads a uvarint that must fit in [0, limit].
func (d *replyReader) int(what string, limit uint64) int {
	v := d.uvarint()
	if d.err == nil && v > limit {
		d.err = fmt.Errorf("%s %d is beyond %d", what, v, limit)
		return 0
	}
	return int(v)
}

func (d *replyReader) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errReplyShort
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// decodeReply decodes encodeReply's bytes (without the length prefix). It allocates
// no more than the bytes that arrived allow.
func decodeReply(b []byte) (rootReply, error) {
	if len(b) == 0 {
		return rootReply{}, errReplyShort
	}
	if b[0] != replyVersion {
		return rootReply{}, fmt.Errorf("format %d, this rank reads %d: do all ranks run the same gonccl version?", b[0], replyVersion)
	}
	d := &replyReader{b: b[1:]}
	var r rootReply
	r.Error, r.Missing = d.string(), d.string()
	n := d.int("rank count", uint64(min(MaxRanks, len(d.b)/minRankBytes)))
	nstr := d.int("string count", uint64(len(d.b)))
	if d.err != nil {
		return rootReply{}, d.err
	}
	strs := make([]string, 0, min(nstr, 1024))
	for range nstr {
		strs = append(strs, d.string())
		if d.err != nil {
			return rootReply{}, d.err
		}
	}
	str := func(what string) string {
		i := d.int(what, uint64(len(strs)))
		if d.err == nil && i == len(strs) {
			d.err = fmt.Errorf("%s refers to string %d of %d", what, i, len(strs))
		}
		if d.err != nil {
			return ""
		}
		return strs[i]
	}
	if n > 0 {
		r.Ranks = make([]rankInfo, n)
	}
	for i := range r.Ranks {
		ri := &r.Ranks[i]
		ri.Rank, ri.NRanks = d.int("rank", MaxRanks), d.int("nranks", MaxRanks)
		ri.Addr, ri.Host, ri.Hostname, ri.Opts = str("address"), str("host"), str("hostname"), str("options")
		ri.Pid = d.int("pid", 1<<31)
		ri.PidNS = str("pid namespace")
		ri.Shm = d.int("shm", 1) == 1
		ri.Epoch = uint32(d.int("epoch", 1<<32-1))
		ri.SockThreads, ri.SocksPerThread = d.int("socket threads", 1<<16), d.int("sockets per thread", 1<<16)
		ri.DeadlineMs, ri.TimeoutMs = d.varint(), d.varint()
		if d.err != nil {
			return rootReply{}, d.err
		}
	}
	if len(d.b) != 0 {
		return rootReply{}, fmt.Errorf("%d bytes left over after the table", len(d.b))
	}
	return r, nil
}
