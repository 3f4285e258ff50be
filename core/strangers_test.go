package core

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonccl/gonccl/transport/tcp"
)

// Strangers: processes that connect to a rank's listening ports (the bootstrap root's
// and each rank's peer listener) without being part of the job. Each is dropped and
// logged at WARN, and the job forms and computes as if they were not there.

// strangerHello is the first message of a dialer's handshake (tcp/handshake.go's
// layout), claiming to be rank from calling rank to on channel 0.
func strangerHello(from, to int) []byte {
	b := make([]byte, 68)
	binary.LittleEndian.PutUint32(b[0:], 0x474e4348) // "GNCH"
	binary.LittleEndian.PutUint32(b[4:], 5)          // protocol version
	binary.LittleEndian.PutUint32(b[8:], uint32(int32(from)))
	binary.LittleEndian.PutUint32(b[12:], uint32(int32(to)))
	_, _ = rand.Read(b[52:]) // the nonce, after epoch 0 and no session (link, flags, count, gen)
	return b
}

// recorder wraps a connection and keeps every byte read from it.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	got []byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	r.mu.Lock()
	r.got = append(r.got, p[:n]...)
	r.mu.Unlock()
	return n, err
}

// recordHandshake records what a genuine rank sends when it dials with the secret:
// the bytes an eavesdropper would capture and replay.
func recordHandshake(t *testing.T, secret []byte, h tcp.Hello) []byte {
	l, err := tcp.Listen(tcp.Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer l.Close()
	rec := make(chan []byte, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			rec <- nil
			return
		}
		r := &recorder{Conn: c}
		_, err = tcp.AcceptHandshake(r, secret, time.Now().Add(5*time.Second))
		c.Close()
		if err != nil {
			rec <- nil
			return
		}
		rec <- r.got
	}()
	c, err := tcp.Dial(l.Addr().String(), secret, nil, h, time.Now().Add(5*time.Second))
	require.NoError(t, err)
	c.Close()
	got := <-rec
	require.NotEmpty(t, got)
	return got
}

// stranger is one kind of unwelcome visitor: it connects to addr, behaves badly, and
// waits for the rank to hang up.
type stranger struct {
	name string
	act  func(c net.Conn) error
}

func strangers(replay []byte, to int) []stranger {
	return []stranger{
		{"wrong secret", func(c net.Conn) error {
			if _, err := c.Write(strangerHello(1, to)); err != nil {
				return err
			}
			var reply [16 + 32]byte
			if _, err := io.ReadFull(c, reply[:]); err != nil {
				return err
			}
			m := hmac.New(sha256.New, []byte("not the secret!!"))
			m.Write(reply[:])
			_, err := c.Write(m.Sum(nil))
			return err
		}},
		{"garbage", func(c net.Conn) error {
			_, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: gonccl\r\n\r\n and then some more bytes"))
			return err
		}},
		{"replay", func(c net.Conn) error {
			_, err := c.Write(replay)
			return err
		}},
		{"silent", func(c net.Conn) error { return nil }},
	}
}

// visit connects every stranger to addr before it returns (the rank listens now, but
// the bootstrap root closes its listener once every rank has joined), then runs them at
// once; each reports on done once the rank has dropped it (or with the reason it could
// not tell).
func visit(addr string, ss []stranger, done chan<- error, handshake time.Duration) {
	for _, s := range ss {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			done <- err
			continue
		}
		go func() {
			defer c.Close()
			if err := s.act(c); err != nil {
				done <- errors.New(s.name + ": " + err.Error())
				return
			}
			// The rank must hang up: reading returns EOF (or a reset), not our deadline.
			_ = c.SetReadDeadline(time.Now().Add(handshake + 10*time.Second))
			_, err = io.Copy(io.Discard, c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				done <- errors.New(s.name + ": the rank never dropped the connection")
				return
			}
			done <- nil
		}()
	}
}

func TestStrangersAreDroppedAndLogged(t *testing.T) {
	obsCore, logs := observer.New(zapcore.WarnLevel)
	hooks := &testHooks{logTee: obsCore, handshakeTimeout: time.Second}

	id, err := newUniqueID(hooks)
	require.NoError(t, err)
	rootAddr, err := id.rootAddr()
	require.NoError(t, err)

	const n = 3
	done := make(chan error, 8)
	visit(rootAddr, strangers(recordHandshake(t, id.secret(), tcp.Hello{From: 1, To: tcp.RootRank}), tcp.RootRank), done, hooks.handshakeTimeout)
	peerReplay := recordHandshake(t, id.secret(), tcp.Hello{From: 1, To: 0})
	hooks.meshListening = func(rank int, addr string) {
		if rank == 0 { // rank 0 accepts every other rank: the strangers queue with them
			visit(addr, strangers(peerReplay, 0), done, hooks.handshakeTimeout)
		}
	}
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, n, r, Options{Timeout: 20 * time.Second, test: hooks})
		}()
	}
	wg.Wait()
	for r := range errs {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer destroyAll(t, comms)

	count := 50001
	opErrs, outs, want := allReduceFloat32(t, comms, count, 3)
	for r, err := range opErrs {
		require.NoError(t, err, "rank %d", r)
	}
	for r := range outs {
		require.Equal(t, want, outs[r], "rank %d", r)
	}

	for i := 0; i < 8; i++ {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("only %d of 8 strangers were dropped", i)
		}
	}

	// One WARN line per stranger and listener, naming why it was dropped.
	reasons := map[string][]string{}
	for _, e := range logs.All() {
		if !strings.HasSuffix(e.Message, "dropped connection") {
			continue
		}
		where := "peer"
		if strings.HasPrefix(e.Message, "bootstrap root") {
			where = "root"
		}
		require.Equal(t, zapcore.WarnLevel, e.Level)
		reasons[where] = append(reasons[where], e.ContextMap()["error"].(string))
	}
	for _, where := range []string{"root", "peer"} {
		got := strings.Join(reasons[where], "\n")
		require.Len(t, reasons[where], 4, "%s listener drops:\n%s", where, got)
		require.Equal(t, 2, strings.Count(got, tcp.ErrAuth.Error()), "wrong secret and replay, %s:\n%s", where, got)
		require.Contains(t, got, "not a gonccl peer", where)
		require.Contains(t, got, "i/o timeout", "the silent one, %s", where)
	}
}

// After init the root listener is closed; each rank's peer listener stays open for
// connections made on demand until the communicator is destroyed.
func TestNoListenerOutlivesComm(t *testing.T) {
	var mu sync.Mutex
	var addrs []string
	hooks := &testHooks{meshListening: func(rank int, addr string) {
		mu.Lock()
		addrs = append(addrs, addr)
		mu.Unlock()
	}}
	id, err := NewUniqueID()
	require.NoError(t, err)
	rootAddr, err := id.rootAddr()
	require.NoError(t, err)
	comms, errs := make([]*Comm, 2), make([]error, 2)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = NewComm(id, 2, r, Options{Timeout: 10 * time.Second, test: hooks})
		}()
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, errs[r])
	}
	require.Len(t, addrs, 2)
	closed := func(a string) func() bool {
		return func() bool {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				c.Close()
			}
			return err != nil
		}
	}
	require.Eventually(t, closed(rootAddr), 5*time.Second, 20*time.Millisecond, "the root still accepts connections after init")
	for _, a := range addrs {
		require.False(t, closed(a)(), "%s stopped listening before the communicator was destroyed", a)
	}
	destroyAll(t, comms)
	for _, a := range addrs {
		require.Eventually(t, func() bool {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err == nil {
				c.Close()
			}
			return err != nil
		}, 5*time.Second, 20*time.Millisecond, "%s still accepts connections after destroy", a)
	}
}
