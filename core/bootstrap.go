package core

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gonccl/gonccl/internal/safego"
	"github.com/gonccl/gonccl/transport"
	"github.com/gonccl/gonccl/transport/tcp"
)

// rankInfo is what each rank tells the root about itself, and what the root hands back
// about every rank.
type rankInfo struct {
	Rank     int    `json:"rank"`
	NRanks   int    `json:"nranks"`
	Addr     string `json:"addr"`     // the rank's peer listener
	Host     string `json:"host"`     // hostIdentity()
	Hostname string `json:"hostname"` // for logs
	Pid      int    `json:"pid"`
	Shm      bool   `json:"shm"`   // willing to use shared memory with ranks on its host
	Epoch    uint32 `json:"epoch"` // the communicator generation it joins (see epoch.go)
	// TCP layout toward peers on other hosts (GONCCL_SOCKET_NTHREADS and
	// GONCCL_NSOCKS_PERTHREAD); joinRoot fills them in if the caller did not.
	SockThreads    int `json:"sock_threads"`
	SocksPerThread int `json:"socks_per_thread"`
}

// pairSockets returns how many TCP connections the collective link between me and
// peer has, and how many goroutines send on it at me's end. Both ends compute the
// same connection count (the smaller of their two products); the thread count is
// me's own. A pair that will talk through shared memory keeps one connection, its
// liveness channel.
func pairSockets(me, peer rankInfo) (socks, threads int) {
	if me.Host == peer.Host && me.Shm && peer.Shm {
		return 1, 1
	}
	socks = max(1, min(me.SockThreads*me.SocksPerThread, peer.SockThreads*peer.SocksPerThread, transport.MaxSockets))
	return socks, max(1, min(me.SockThreads, socks))
}

// rootReply is the root's answer: every rank's info, or why the job cannot start.
type rootReply struct {
	Ranks []rankInfo `json:"ranks"`
	Error string     `json:"error,omitempty"`
}

// maxMsg bounds a bootstrap message, so a hostile peer cannot make us allocate much.
const maxMsg = 1 << 20

// handshakeTimeout bounds how long an unauthenticated connection may take to prove
// itself before it is dropped (a variable so tests can shorten it).
var handshakeTimeout = 10 * time.Second

func writeMsg(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := c.Write(append(n[:], b...)); err != nil {
		return err
	}
	return nil
}

func readMsg(c net.Conn, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxMsg {
		return fmt.Errorf("bootstrap message of %d bytes exceeds the %d-byte limit", size, maxMsg)
	}
	// Memory grows with the bytes that actually arrive, not with the announced size.
	b, err := io.ReadAll(io.LimitReader(c, int64(size)))
	if err != nil {
		return err
	}
	if len(b) < int(size) {
		return fmt.Errorf("bootstrap message cut short after %d of %d bytes: %w", len(b), size, io.ErrUnexpectedEOF)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("malformed bootstrap message: %w", err)
	}
	return nil
}

// serveRoot gathers every rank's info on l and sends the full table back to each,
// then closes. Connections that fail the handshake are logged and dropped.
func serveRoot(l *net.TCPListener, secret []byte, deadline time.Time, logs loggers, g safego.Guard) {
	defer l.Close()
	_ = l.SetDeadline(deadline)
	type member struct {
		conn net.Conn
		info rankInfo
	}
	joined := make(chan member)
	died := make(chan error, 1) // a panic in a goroutine below: the root fails every rank with it
	dying := func(err error) {
		select {
		case died <- err:
		default:
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	g.Go("bootstrap root accept", nil, dying, func() {
		for {
			c, err := l.AcceptTCP()
			if err != nil {
				return
			}
			tcp.Accepted(c)
			g.Go("bootstrap root join", &wg, func(err error) { c.Close(); dying(err) }, func() {
				h, err := tcp.AcceptHandshake(c, secret, time.Now().Add(handshakeTimeout))
				if err == nil && h.To != tcp.RootRank {
					err = fmt.Errorf("peer addressed rank %d, not the bootstrap root", h.To)
				}
				var info rankInfo
				if err == nil {
					_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
					err = readMsg(c, &info)
					_ = c.SetReadDeadline(time.Time{})
				}
				if err == nil && info.Rank != h.From {
					err = fmt.Errorf("peer proved rank %d but claims rank %d", h.From, info.Rank)
				}
				if err != nil {
					logs.net.Warn("bootstrap root: dropped connection", zap.Stringer("from", c.RemoteAddr()), zap.Error(err))
					c.Close()
					return
				}
				select {
				case joined <- member{c, info}:
				case <-stop:
					c.Close()
				}
			})
		}
	})

	var members []member
	byRank := map[int]bool{}
	nranks := -1
	var epoch uint32
	fail := func(msg string) {
		logs.init.Warn("bootstrap root: " + msg)
		for _, m := range members {
			_ = writeMsg(m.conn, rootReply{Error: msg})
			m.conn.Close()
		}
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for nranks < 0 || len(members) < nranks {
		select {
		case m := <-joined:
			err := checkJoin(m.info, nranks, byRank)
			if err == nil && nranks >= 0 && m.info.Epoch != epoch {
				err = fmt.Errorf("rank %d joins generation (epoch) %d but earlier ranks joined epoch %d: a rank of another generation",
					m.info.Rank, m.info.Epoch, epoch)
			}
			if err != nil {
				logs.init.Warn("bootstrap root: refused a rank: " + err.Error())
				_ = writeMsg(m.conn, rootReply{Error: err.Error()})
				m.conn.Close()
				continue
			}
			nranks, epoch = m.info.NRanks, m.info.Epoch
			byRank[m.info.Rank] = true
			members = append(members, m)
		case <-timer.C:
			fail(fmt.Sprintf("timed out waiting for ranks %s to join", missingRanks(nranks, byRank)))
			return
		case err := <-died:
			fail(err.Error())
			return
		}
	}
	table := make([]rankInfo, nranks)
	for _, m := range members {
		table[m.info.Rank] = m.info
	}
	for _, m := range members {
		_ = writeMsg(m.conn, rootReply{Ranks: table})
		m.conn.Close()
	}
}

// joinRoot tells the root about this rank and returns every rank's info.
func joinRoot(id *UniqueID, me rankInfo, deadline time.Time) ([]rankInfo, error) {
	if me.SockThreads == 0 {
		cfg, err := loadConfig()
		if err != nil {
			return nil, err
		}
		me.SockThreads, me.SocksPerThread = cfg.sockThreads, cfg.socksPerThread
	}
	addr, err := id.rootAddr()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	c, err := tcp.Dial(addr, id.secret(), tcp.Hello{From: me.Rank, To: tcp.RootRank}, deadline)
	if err != nil {
		return nil, fmt.Errorf("bootstrap root: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if err := writeMsg(c, me); err != nil {
		return nil, fmt.Errorf("bootstrap root at %s: %w", addr, err)
	}
	var reply rootReply
	if err := readMsg(c, &reply); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil, fmt.Errorf("%w: waiting for all %d ranks to join (not every rank called init with this unique id)", ErrTimeout, me.NRanks)
		}
		return nil, fmt.Errorf("bootstrap root at %s: %w", addr, err)
	}
	if err := checkReply(&reply, me.NRanks); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return reply.Ranks, nil
}

// MaxRanks bounds a communicator's size, so that a rank count read from the wire (or
// passed by mistake) cannot make the root or a rank allocate without limit.
const MaxRanks = 1 << 20

// checkJoin is the root's check of a rank's announcement, given the rank count the
// earlier ranks announced (-1: none yet) and the ranks already joined.
func checkJoin(info rankInfo, nranks int, byRank map[int]bool) error {
	switch {
	case info.NRanks < 1 || info.NRanks > MaxRanks:
		return fmt.Errorf("rank %d says nranks=%d, outside 1..%d", info.Rank, info.NRanks, MaxRanks)
	case nranks >= 0 && info.NRanks != nranks:
		return fmt.Errorf("rank %d says nranks=%d but earlier ranks said %d", info.Rank, info.NRanks, nranks)
	case info.Rank < 0 || info.Rank >= info.NRanks:
		return fmt.Errorf("rank %d is out of range for nranks=%d", info.Rank, info.NRanks)
	case byRank[info.Rank]:
		return fmt.Errorf("rank %d joined twice with the same unique id", info.Rank)
	}
	return nil
}

// checkReply is a rank's check of the root's answer.
func checkReply(reply *rootReply, nranks int) error {
	if reply.Error != "" {
		return errors.New(reply.Error)
	}
	if len(reply.Ranks) != nranks {
		return fmt.Errorf("root returned %d ranks, expected %d", len(reply.Ranks), nranks)
	}
	for i, ri := range reply.Ranks {
		if ri.Rank != i || ri.NRanks != nranks {
			return fmt.Errorf("root's table has rank %d of %d in slot %d", ri.Rank, ri.NRanks, i)
		}
	}
	return nil
}

// missingRanks lists the ranks below nranks not in joined, the first few of them only.
func missingRanks(nranks int, joined map[int]bool) string {
	const show = 16
	var list []string
	n := 0
	for r := 0; r < nranks && n < nranks-len(joined); r++ {
		if !joined[r] {
			if n < show {
				list = append(list, fmt.Sprint(r))
			}
			n++
		}
	}
	if n > show {
		list = append(list, fmt.Sprintf("... (%d in all)", n))
	}
	return "[" + strings.Join(list, " ") + "]"
}

// meshListening, when set (by tests), is told each rank's peer listener address as
// the rank starts connecting its mesh.
var meshListening func(rank int, addr string)

// connectMesh connects this rank to every other: it dials lower ranks and accepts
// higher ones on l, checking each peer's proof of the secret. Strangers and impostors
// are logged and dropped; the mesh forms without them. Each pair gets a collective
// link over pairSockets connections (channels tcp.CollChannel(0..)), a StreamLink
// over one or a StripedLink over several, and one connection for point-to-point
// messages (tcp.ChannelP2P), returned as msgs.
func connectMesh(l *net.TCPListener, secret []byte, rank int, epoch uint32, ranks []rankInfo, deadline time.Time, logs loggers, g safego.Guard) (links []transport.Link, msgs []*transport.MsgConn, err error) {
	if meshListening != nil {
		meshListening(rank, l.Addr().String())
	}
	n := len(ranks)
	conns := make([][]net.Conn, n)
	threads := make([]int, n)
	for p := range ranks {
		if p != rank {
			var k int
			k, threads[p] = pairSockets(ranks[rank], ranks[p])
			conns[p] = make([]net.Conn, k)
		}
	}
	msgs = make([]*transport.MsgConn, n)
	var mu sync.Mutex
	var firstErr error
	setErr := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for peer := 0; peer < rank; peer++ {
		chans := []uint8{tcp.ChannelP2P}
		for s := range conns[peer] {
			chans = append(chans, tcp.CollChannel(s))
		}
		for _, ch := range chans {
			g.Go("bootstrap dial", &wg, setErr, func() {
				c, err := tcp.Dial(ranks[peer].Addr, secret, tcp.Hello{From: rank, To: peer, Channel: ch, Epoch: epoch}, deadline)
				if err != nil {
					setErr(fmt.Errorf("connecting to rank %d: %w", peer, err))
					return
				}
				mu.Lock()
				if ch == tcp.ChannelP2P {
					msgs[peer] = transport.NewMsgConn(peer, c)
				} else {
					conns[peer][tcp.CollSocket(ch)] = c
				}
				mu.Unlock()
			})
		}
	}
	want := 0
	for p := rank + 1; p < n; p++ {
		want += len(conns[p]) + 1
	}
	if want > 0 {
		failed := make(chan struct{}) // closed by the first panic of an accepting goroutine
		var failOnce sync.Once
		acceptFailed := func(err error) {
			setErr(err)
			failOnce.Do(func() { close(failed) })
		}
		g.Go("bootstrap accept wait", &wg, setErr, func() {
			accepted := make(chan struct{})
			done := make(chan struct{})
			defer close(done)
			g.Go("bootstrap accept", nil, acceptFailed, func() {
				acceptPeers(l, secret, rank, epoch, n, conns, msgs, &mu, accepted, done, logs, g, acceptFailed)
			})
			timer := time.NewTimer(time.Until(deadline))
			defer timer.Stop()
			for got := 0; got < want; {
				select {
				case <-accepted:
					got++
				case <-failed:
					return
				case <-timer.C:
					mu.Lock()
					var missing []int
					for p := rank + 1; p < n; p++ {
						if msgs[p] == nil || slices.Contains(conns[p], nil) {
							missing = append(missing, p)
						}
					}
					mu.Unlock()
					setErr(fmt.Errorf("%w: waiting for ranks %v to connect", ErrTimeout, missing))
					return
				}
			}
		})
	}
	wg.Wait()
	mu.Lock() // an accepting goroutine (not waited for) may still report a panic
	meshErr := firstErr
	mu.Unlock()
	if meshErr == nil {
		links, meshErr = meshLinks(rank, conns, threads, logs, g)
	}
	if meshErr != nil {
		for p := range conns {
			for _, c := range conns[p] {
				if c != nil {
					c.Close()
				}
			}
			if msgs[p] != nil {
				msgs[p].Close()
			}
		}
		return nil, nil, meshErr
	}
	return links, msgs, nil
}

// meshLinks builds the collective link to each peer over its connections.
func meshLinks(rank int, conns [][]net.Conn, threads []int, logs loggers, g safego.Guard) ([]transport.Link, error) {
	links := make([]transport.Link, len(conns))
	for p, cs := range conns {
		switch {
		case p == rank:
		case len(cs) == 1:
			links[p] = transport.NewStreamLink(p, cs[0])
		default:
			sl, err := transport.NewStripedLink(p, cs, threads[p], g)
			if err != nil {
				for _, l := range links[:p] {
					if sl, ok := l.(*transport.StripedLink); ok {
						sl.Close() // stops its goroutines; the caller closes the rest
					}
				}
				return nil, err
			}
			links[p] = sl
			logs.net.Info(fmt.Sprintf("rank %d: %d tcp connections, %d sending goroutines", p, len(cs), threads[p]))
		}
	}
	return links, nil
}

// acceptPeers accepts connections on l until it is closed, and registers in conns (or
// msgs, by channel) every higher rank that proves the secret, signalling each on
// accepted.
//
// Its goroutines run under g; a panic in one is passed to failed, which fails init.
func acceptPeers(l *net.TCPListener, secret []byte, rank int, epoch uint32, n int, conns [][]net.Conn, msgs []*transport.MsgConn, mu *sync.Mutex, accepted chan<- struct{}, done <-chan struct{}, logs loggers, g safego.Guard, failed func(error)) {
	g.Go("bootstrap closer", nil, failed, func() {
		<-done
		l.Close()
	})
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			return
		}
		tcp.Accepted(c)
		g.Go("bootstrap handshake", nil, func(err error) { c.Close(); failed(err) }, func() {
			h, err := tcp.AcceptHandshake(c, secret, time.Now().Add(handshakeTimeout))
			mu.Lock()
			sock := tcp.CollSocket(h.Channel)
			finished := false // connectMesh is done with conns and msgs (see there)
			select {
			case <-done:
				finished = true
			default:
			}
			switch {
			case err != nil:
			case finished:
				err = errors.New("connected after init had stopped waiting for connections")
			case h.Epoch != epoch:
				err = fmt.Errorf("rank %d belongs to communicator generation (epoch) %d, this one is epoch %d: a stale or foreign rank", h.From, h.Epoch, epoch)
			case h.To != rank || h.From <= rank || h.From >= n:
				err = fmt.Errorf("peer claims to be rank %d calling rank %d", h.From, h.To)
			case h.Channel != tcp.ChannelP2P && (sock < 0 || sock >= len(conns[h.From])):
				err = fmt.Errorf("rank %d asked for unknown channel %d (its link has %d connections)", h.From, h.Channel, len(conns[h.From]))
			case h.Channel == tcp.ChannelP2P && msgs[h.From] != nil,
				h.Channel != tcp.ChannelP2P && conns[h.From][sock] != nil:
				err = fmt.Errorf("rank %d connected twice on channel %d", h.From, h.Channel)
			case h.Channel == tcp.ChannelP2P:
				msgs[h.From] = transport.NewMsgConn(h.From, c)
			default:
				conns[h.From][sock] = c
			}
			mu.Unlock()
			if err != nil {
				logs.net.Warn("dropped connection", zap.Stringer("from", c.RemoteAddr()), zap.Error(err))
				c.Close()
				return
			}
			select {
			case accepted <- struct{}{}:
			case <-done:
			}
		})
	}
}
