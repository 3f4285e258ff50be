package core

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/gonccl/gonccl/internal/safego"
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
	PidNS    string `json:"pidns,omitempty"` // pidNamespace(): Pid means this process only inside it
	Shm      bool   `json:"shm"`             // willing to use shared memory with ranks on its host
	Epoch    uint32 `json:"epoch"`           // the communicator generation it joins (see epoch.go)
	// The per-communicator options that every rank must share (Options.Algo and
	// ChunkBytes), compared after the join.
	Opts string `json:"opts,omitempty"`
	// TCP layout toward peers on other hosts (GONCCL_SOCKET_NTHREADS and
	// GONCCL_NSOCKS_PERTHREAD); joinRoot fills them in if the caller did not.
	SockThreads    int `json:"sock_threads"`
	SocksPerThread int `json:"socks_per_thread"`
	// DeadlineMs is when the rank's init gives up (Unix milliseconds; 0: not said):
	// the root gives up a little earlier, so that the rank learns from it which
	// ranks never joined (see rootMargin). TimeoutMs is the rank's init timeout, for
	// its message.
	DeadlineMs int64 `json:"deadline_ms,omitempty"`
	TimeoutMs  int64 `json:"timeout_ms,omitempty"`
}

// rootMargin is how long before the earliest deadline of the ranks that joined the
// root gives up waiting for the others, so that its answer naming them reaches every
// rank before the rank's own deadline.
const rootMargin = 300 * time.Millisecond

// pairSockets returns how many TCP connections the collective link between me and
// peer has, and how many goroutines send on it at me's end. Both ends compute the
// same connection count (the smaller of their two products); the thread count is
// me's own. A pair that will talk through shared memory keeps one connection, its
// liveness channel.
func pairSockets(me, peer rankInfo) (socks, threads int) {
	if me.Host == peer.Host && me.Shm && peer.Shm {
		return 1, 1
	}
	socks = max(1, min(me.SockThreads*me.SocksPerThread, peer.SockThreads*peer.SocksPerThread, tcp.MaxSockets))
	return socks, max(1, min(me.SockThreads, socks))
}

// rootReply is the root's answer: every rank's info, or why the job cannot start
// (encoded by encodeReply, bootstrap_reply.go).
type rootReply struct {
	Ranks []rankInfo
	Error string
	// Missing lists the ranks that had not joined when the root gave up waiting
	// ("[2 5]", see missingRanks; Error then says so).
	Missing string
}

// maxMsg bounds a bootstrap message, so a hostile peer cannot make us allocate much.
const maxMsg = 1 << 20

// defaultHandshakeTimeout bounds how long an unauthenticated connection may take to
// prove itself before it is dropped (tests shorten it: testHooks.handshakeTimeout).
const defaultHandshakeTimeout = 10 * time.Second

// writeMsg sends v as JSON after its length (a rank's announcement to the root).
func writeMsg(c net.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = c.Write(append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...))
	return err
}

func readMsg(c net.Conn, v any) error {
	b, err := readFrame(c)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("malformed bootstrap message: %w", err)
	}
	return nil
}

// readFrame reads one length-prefixed bootstrap message (writeMsg's, encodeReply's).
func readFrame(c net.Conn) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxMsg {
		return nil, fmt.Errorf("bootstrap message of %d bytes exceeds the %d-byte limit", size, maxMsg)
	}
	// Memory grows with the bytes that actually arrive, not with the announced size.
	b, err := io.ReadAll(io.LimitReader(c, int64(size)))
	if err != nil {
		return nil, err
	}
	if len(b) < int(size) {
		return nil, fmt.Errorf("bootstrap message cut short after %d of %d bytes: %w", len(b), size, io.ErrUnexpectedEOF)
	}
	return b, nil
}

// serveRoot gathers every rank's info on l and sends the full table back to each,
// then closes. Connections that fail the handshake are logged and dropped. The
// accepting goroutines, the gathering loop and the reply share its channels and its
// member table, so the root's whole protocol stays in this one function.
func serveRoot(l *net.TCPListener, secret []byte, sec *tcp.TLS, deadline time.Time, handshake time.Duration, logs loggers, g safego.Guard) {
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
	// The accepting goroutine adds each join goroutine to wg; stopping flips under mu,
	// so that no Add can race with the final Wait (a WaitGroup's rule).
	var wg sync.WaitGroup
	var mu sync.Mutex
	stopped := false
	stop := make(chan struct{})
	defer func() {
		mu.Lock()
		stopped = true
		close(stop)
		mu.Unlock()
		wg.Wait()
	}()
	g.Go("bootstrap root accept", nil, dying, func() {
		var pause time.Duration
		for {
			c, err := l.AcceptTCP()
			if err != nil {
				var again bool
				if pause, again = acceptPause(err, pause); !again {
					return
				}
				time.Sleep(pause) // out of descriptors, say: the ranks' joins wait in the backlog
				continue
			}
			pause = 0
			tcp.Accepted(c)
			mu.Lock()
			if stopped {
				mu.Unlock()
				c.Close()
				return
			}
			g.Go("bootstrap root join", &wg, func(err error) { c.Close(); dying(err) }, func() {
				sc, h, err := tcp.Accept(c, secret, sec, time.Now().Add(handshake))
				if err == nil && h.To != tcp.RootRank {
					err = fmt.Errorf("peer addressed rank %d, not the bootstrap root", h.To)
				}
				var info rankInfo
				if err == nil {
					_ = sc.SetReadDeadline(time.Now().Add(handshake))
					err = readMsg(sc, &info)
					_ = sc.SetReadDeadline(time.Time{})
				}
				if err == nil && info.Rank != h.From {
					err = fmt.Errorf("peer proved rank %d but claims rank %d", h.From, info.Rank)
				}
				if err != nil {
					logs.net.Warn("bootstrap root: dropped connection", zap.Stringer("from", c.RemoteAddr()), zap.Error(err))
					c.Close()
					return
				}
				if name := tcp.PeerName(sc); name != "" {
					logs.net.Info(fmt.Sprintf("bootstrap root: rank %d joined over TLS, certificate %s", info.Rank, name))
				}
				select {
				case joined <- member{sc, info}:
				case <-stop:
					c.Close()
				}
			})
			mu.Unlock()
		}
	})

	var members []member
	byRank := map[int]bool{}
	nranks := -1
	var epoch uint32
	fail := func(reply rootReply) {
		logs.init.Warn("bootstrap root: " + reply.Error)
		b := encodeReply(reply)
		for _, m := range members {
			_, _ = m.conn.Write(b)
			m.conn.Close()
		}
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	// Until a rank says when its init gives up, the root waits until deadline (its
	// process's GONCCL_TIMEOUT_MS); from then on, until the earliest of the members'
	// deadlines less rootMargin: the ranks' own timeouts (torch's, under torch) govern.
	giveUp, told := deadline, false
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
				_, _ = m.conn.Write(encodeReply(rootReply{Error: err.Error()}))
				m.conn.Close()
				continue
			}
			nranks, epoch = m.info.NRanks, m.info.Epoch
			byRank[m.info.Rank] = true
			members = append(members, m)
			if m.info.DeadlineMs > 0 {
				if d := time.UnixMilli(m.info.DeadlineMs).Add(-rootMargin); !told || d.Before(giveUp) {
					giveUp, told = d, true
					timer.Reset(time.Until(d))
				}
			}
		case <-timer.C:
			missing := missingRanks(nranks, byRank)
			fail(rootReply{Error: fmt.Sprintf("timed out waiting for ranks %s to join", missing), Missing: missing})
			return
		case err := <-died:
			fail(rootReply{Error: err.Error()})
			return
		}
	}

	table := make([]rankInfo, nranks)
	for _, m := range members {
		table[m.info.Rank] = m.info
	}
	// One encoding for every rank.
	reply := encodeReply(rootReply{Ranks: table})
	if len(reply)-4 > maxMsg {
		fail(rootReply{Error: fmt.Sprintf("the table of %d ranks takes %d bytes, beyond the %d-byte limit of a bootstrap message", nranks, len(reply)-4, maxMsg)})
		return
	}
	// The ranks of this process last: their init returns once they have the table,
	// and by then every other rank's connection here is answered and closed, so a
	// rank that counts its fds right after init does not find the root's hundreds.
	slices.SortStableFunc(members, func(a, b member) int {
		return cmp.Compare(boolInt(a.info.Pid == os.Getpid()), boolInt(b.info.Pid == os.Getpid()))
	})
	for _, m := range members {
		_, _ = m.conn.Write(reply)
		m.conn.Close()
	}
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// joinRoot tells the root about this rank and returns every rank's info.
func joinRoot(id *UniqueID, me rankInfo, sec *tcp.TLS, deadline time.Time) ([]rankInfo, error) {
	if me.SockThreads == 0 {
		cfg, err := loadConfig()
		if err != nil {
			return nil, err
		}
		me.SockThreads, me.SocksPerThread = cfg.sockThreads, cfg.socksPerThread
	}
	me.DeadlineMs = deadline.UnixMilli()
	addr, err := id.rootAddr()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	c, err := tcp.Dial(addr, id.secret(), sec, tcp.Hello{From: me.Rank, To: tcp.RootRank}, deadline)
	if err != nil {
		return nil, fmt.Errorf("bootstrap root: %w (%s)", err, bootstrapHint)
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	if err := writeMsg(c, me); err != nil {
		return nil, fmt.Errorf("bootstrap root at %s: %w", addr, err)
	}
	reply, err := readReply(c)
	if err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return nil, &timeoutError{after: time.Since(deadline.Add(-time.Duration(me.TimeoutMs) * time.Millisecond)),
				waiting: fmt.Sprintf("waiting for the bootstrap root at %s (rank 0) to answer", addr),
				hint:    "not every rank called init with this unique id, or rank 0's process stopped answering"}
		}
		return nil, fmt.Errorf("bootstrap root at %s: %w", addr, err)
	}
	if reply.Missing != "" {
		timeout := time.Duration(me.TimeoutMs) * time.Millisecond
		return nil, &timeoutError{after: time.Since(deadline.Add(-timeout)),
			waiting: fmt.Sprintf("waiting for ranks %s to join: they never called init with this group", reply.Missing),
			hint: fmt.Sprintf("the init timeout is %d ms; is each of them running, and does it reach the same init_process_group or new_group call?",
				me.TimeoutMs)}
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

// bootstrapHint is the next step a bootstrap failure's message suggests: rank 0
// advertises the address of the interface GONCCL_SOCKET_IFNAME picks (else the first
// that is up and not loopback), which the other ranks must be able to reach.
const bootstrapHint = "check that every rank can reach rank 0's address; pick the interface with " +
	"GONCCL_SOCKET_IFNAME (e.g. =eth0), and see GONCCL_DEBUG=INFO's INIT lines for the one each rank uses"
