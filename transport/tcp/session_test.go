package tcp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Sessions over real loopback sockets: two "ranks", each with a listener and a
// registry as core has them; rank 1 dials (the higher rank of a pair), rank 0 accepts.

type sessRank struct {
	rank   int
	l      *net.TCPListener
	reg    Registry
	tls    *TLS
	secret []byte
	accept chan *Session // rank 0: sessions made from first connects
	logs   chan string
	served chan error // what Serve answered each reconnect
}

func newSessRank(t testing.TB, rank int, sec *TLS) *sessRank {
	l, err := Listen(Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	r := &sessRank{rank: rank, l: l, tls: sec, secret: tlsSecret, accept: make(chan *Session, 4),
		logs: make(chan string, 1000), served: make(chan error, 100)}
	t.Cleanup(func() { l.Close() })
	return r
}

func (r *sessRank) log(m string) {
	select {
	case r.logs <- m:
	default:
	}
}

// serve accepts until the listener closes: reconnects go to the registry, first
// connects become acceptor sessions that call peer back at callAddr.
// sessOpts vary a test's sessions: checksums, and a wrapper around every connection
// rank 1 dials (a corrupting one, say).
type sessOpts struct {
	retry    time.Duration
	checksum bool
	wrap     func(net.Conn) net.Conn
	// redial, if set, stands between rank 1's session and its real reconnect (real):
	// what a network that corrupts the handshake would make of it.
	redial func(real func() (net.Conn, uint64, error)) (net.Conn, uint64, error)
}

func (r *sessRank) serveWith(o sessOpts, callAddr string) {
	retry := o.retry
	for {
		raw, err := r.l.AcceptTCP()
		if err != nil {
			return
		}
		Accepted(raw)
		go func() {
			c, h, err := Accept(raw, r.secret, r.tls, time.Now().Add(2*time.Second))
			if err != nil {
				r.served <- err
				raw.Close()
				return
			}
			if IsLingerAsk(h) {
				r.served <- r.reg.ServeLinger(c, h, r.secret)
				return
			}
			if h.Resume {
				r.served <- r.reg.Serve(c, h)
				return
			}
			s := NewSession(c, SessionConfig{Peer: h.From, Channel: h.Channel, Link: h.Link, Retry: retry, Log: r.log, Checksum: h.Checksum, Secret: r.secret,
				Call: func(gen uint64, deadline time.Time) error {
					return CallResume(callAddr, r.secret, r.tls, Hello{From: r.rank, To: h.From, Channel: ChannelCall, Link: h.Link, Resume: true, Count: gen}, deadline)
				}})
			r.reg.Add(h.From, h.Link, s)
			r.accept <- s
		}()
	}
}

// sessionPair connects rank 1's session to rank 0's (channel 0, link id 7).
func sessionPair(t *testing.T, retry time.Duration, sec0, sec1 *TLS) (dial, acc *Session, r0, r1 *sessRank) {
	return sessionPairWith(t, sessOpts{retry: retry}, sec0, sec1)
}

func sessionPairWith(t testing.TB, o sessOpts, sec0, sec1 *TLS) (dial, acc *Session, r0, r1 *sessRank) {
	r0, r1 = newSessRank(t, 0, sec0), newSessRank(t, 1, sec1)
	addr0 := r0.l.Addr().String()
	go r0.serveWith(o, r1.l.Addr().String())
	go r1.serveWith(o, "")
	wrap := func(c net.Conn) net.Conn { return c }
	if o.wrap != nil {
		wrap = o.wrap
	}
	h := Hello{From: 1, To: 0, Channel: ChannelColl, Link: 7, Checksum: o.checksum}
	c, err := DialOnce(addr0, tlsSecret, sec1, h, time.Now().Add(5*time.Second))
	require.NoError(t, err)
	dial = NewSession(wrap(c), SessionConfig{Peer: 0, Channel: ChannelColl, Link: 7, Retry: o.retry, Log: r1.log, Checksum: o.checksum, Secret: tlsSecret,
		Redial: func(delivered, gen uint64, deadline time.Time) (net.Conn, uint64, error) {
			real := func() (net.Conn, uint64, error) {
				rh := h
				rh.Resume, rh.Count, rh.Gen = true, delivered, gen
				c, n, err := DialResume(addr0, tlsSecret, sec1, rh, deadline)
				if err != nil {
					return nil, 0, err
				}
				return wrap(c), n, nil
			}
			if o.redial != nil {
				return o.redial(real)
			}
			return real()
		}})
	r1.reg.Add(0, 7, dial)
	select {
	case acc = <-r0.accept:
	case <-time.After(5 * time.Second):
		t.Fatal("no session accepted")
	}
	t.Cleanup(func() { dial.Close(); acc.Close() })
	return dial, acc, r0, r1
}

// pump streams n random bytes each way between a and b in random pieces, and checks
// what arrives; strike(i) runs after every 4 MiB b reads.
func pump(t *testing.T, a, b *Session, n int, strike func(i int)) {
	rng := rand.New(rand.NewSource(1))
	ab, ba := make([]byte, n), make([]byte, n)
	rng.Read(ab)
	rng.Read(ba)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	write := func(w io.Writer, data []byte, seed int64) {
		defer wg.Done()
		rng := rand.New(rand.NewSource(seed))
		for len(data) > 0 {
			k := min(len(data), 1+rng.Intn(3<<20))
			if _, err := w.Write(data[:k]); err != nil {
				errs <- err
				return
			}
			data = data[k:]
		}
	}
	read := func(r io.Reader, want []byte, strike func(i int)) {
		defer wg.Done()
		got := make([]byte, len(want))
		for off, i := 0, 0; off < len(got); i++ {
			k := min(len(got)-off, 1<<20)
			if _, err := io.ReadFull(r, got[off:off+k]); err != nil {
				errs <- err
				return
			}
			off += k
			if strike != nil && i%4 == 3 {
				strike(i / 4)
			}
		}
		if !bytes.Equal(got, want) {
			i := 0
			for got[i] == want[i] {
				i++
			}
			errs <- fmt.Errorf("stream differs from byte %d", i)
		}
	}
	for _, s := range []*Session{a, b} {
		_ = s.SetDeadline(time.Now().Add(60 * time.Second))
	}
	wg.Add(4)
	go write(a, ab, 2)
	go write(b, ba, 3)
	go read(b, ab, strike)
	go read(a, ba, nil)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestSessionSurvivesResets resets the connection under a session over and over (as
// ss -K does: a RST, from either side) while both directions stream; every byte
// arrives once and in order, and both sides log the breaks and resumes.
func TestSessionSurvivesResets(t *testing.T) {
	for _, tc := range []struct {
		name string
		tls  bool
	}{{"plain", false}, {"tls", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var s0, s1 *TLS
			if tc.tls {
				_, secs := groupTLS(t, 2)
				s0, s1 = secs[0], secs[1]
			}
			dial, acc, r0, r1 := sessionPair(t, 5*time.Second, s0, s1)
			pump(t, dial, acc, 48<<20, func(i int) {
				s := []*Session{dial, acc}[i%2]
				if down, _ := s.Down(); !down {
					abort(s.Conn()) // a reset seen first by one side, then the other
				}
			})
			require.GreaterOrEqual(t, dial.Resumes(), 4, "resumes")
			require.Equal(t, dial.Resumes(), acc.Resumes())
			sent, _ := dial.Counts()
			_, got := acc.Counts()
			require.Equal(t, uint64(48<<20), sent)
			require.Equal(t, sent, got)
			if tc.tls {
				require.True(t, strings.HasPrefix(PeerName(dial), "CN=rank-0 "), "the resumed link is TLS to the same peer: %q", PeerName(dial))
				require.True(t, strings.HasPrefix(PeerName(acc), "CN=rank-1 "), "%q", PeerName(acc))
			}
			requireLogged(t, r1.logs, "link to rank 0 (channel 0) resumed after")
			requireLogged(t, r0.logs, "link to rank 1 (channel 0) resumed after")
		})
	}
}

// TestResetReadAsEOFIsABreak: once a write on a connection has taken the reset's
// error, the next read on it returns end-of-file, as if the peer had closed its end.
// A session whose writer and reader race on a reset must take that for a break and
// resume, never end the stream.
func TestResetReadAsEOFIsABreak(t *testing.T) {
	dial, acc, _, _ := sessionPair(t, 5*time.Second, nil, nil)
	abort(acc.Conn()) // a reset, seen by neither session yet
	raw := rawTCP(dial.Conn())
	require.Eventually(t, func() bool { // the writer's side of the race takes the error
		_, err := raw.Write([]byte{0})
		return err != nil
	}, 5*time.Second, 10*time.Millisecond)
	go func() { _, _ = acc.Write([]byte("after")) }()
	_ = dial.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, 5)
	_, err := io.ReadFull(dial, got)
	require.NoError(t, err, "a reset read as end-of-file ended the stream")
	require.Equal(t, "after", string(got))
	require.Equal(t, 1, dial.Resumes())
}

// TestPeerCloseIsTheEndOfTheStream: a peer that closes its session on purpose (a FIN)
// ends the stream: the reader gets io.EOF and nothing reconnects.
func TestPeerCloseIsTheEndOfTheStream(t *testing.T) {
	dial, acc, _, _ := sessionPair(t, 5*time.Second, nil, nil)
	_, err := acc.Write([]byte("last"))
	require.NoError(t, err)
	require.NoError(t, acc.Close())
	_ = dial.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(dial)
	require.NoError(t, err)
	require.Equal(t, "last", string(got))
	_, err = dial.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
	require.Zero(t, dial.Resumes())
}

func requireLogged(t *testing.T, logs chan string, what string) {
	t.Helper()
	var all []string
	for {
		select {
		case m := <-logs:
			if strings.Contains(m, what) {
				return
			}
			all = append(all, m)
		default:
			t.Fatalf("no log line with %q in:\n%s", what, strings.Join(all, "\n"))
		}
	}
}

// flipConn flips one bit of the payload of every every-th large record (in its first
// piece: a session writes a record's header apart through a wrapper, then its
// pieces): corruption on the way that TCP's checksum does not see (it is made before
// TCP computes its own).
type flipConn struct {
	net.Conn
	every, n int
	flipped  *atomic.Int64
	first    bool // the last write was a record header
}

func (c *flipConn) Write(p []byte) (int, error) {
	first := c.first
	c.first = len(p) == recordHeader
	if len(p) > 4096 && first {
		c.n++
		if c.n%c.every == 0 {
			q := append([]byte(nil), p...)
			q[len(q)/2] ^= 0x10
			c.flipped.Add(1)
			return c.Conn.Write(q)
		}
	}
	return c.Conn.Write(p)
}

// abort must reach the TCP connection under the wrapper.
func (c *flipConn) raw() net.Conn { return c.Conn }

// TestChecksumCatchesCorruption: with checksums, bytes corrupted on the way never
// reach the reader: each bad record is resent over a resumed connection and the
// stream arrives exact; without them, the same corruption arrives as it is.
func TestChecksumCatchesCorruption(t *testing.T) {
	var flipped atomic.Int64
	wrap := func(c net.Conn) net.Conn { return &flipConn{Conn: c, every: 7, flipped: &flipped} }
	dial, acc, r0, _ := sessionPairWith(t, sessOpts{retry: 5 * time.Second, checksum: true, wrap: wrap}, nil, nil)
	pump(t, dial, acc, 24<<20, func(int) {})
	require.Greater(t, flipped.Load(), int64(2), "the corrupter flipped nothing")
	require.GreaterOrEqual(t, acc.Resumes(), 1)
	requireLogged(t, r0.logs, "frame checksum (CRC32C) mismatch")

	flipped.Store(0)
	wrap = func(c net.Conn) net.Conn { return &flipConn{Conn: c, every: 1, flipped: &flipped} }
	dial, acc, _, _ = sessionPairWith(t, sessOpts{retry: 5 * time.Second, wrap: wrap}, nil, nil)
	data := make([]byte, 4<<20)
	rand.New(rand.NewSource(5)).Read(data)
	go func() { _, _ = dial.Write(data) }()
	got := make([]byte, len(data))
	_ = acc.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.ReadFull(acc, got)
	require.NoError(t, err)
	require.Positive(t, flipped.Load())
	require.False(t, bytes.Equal(data, got), "without checksums the corruption goes through unseen")
}

// TestChecksumFailsSpreadOutAreSurvived: a link that corrupts now and then, many more
// times in all than a session gives up after in a row, still carries the stream exact:
// only failures with no good record between them count towards the limit.
func TestChecksumFailsSpreadOutAreSurvived(t *testing.T) {
	var flipped atomic.Int64
	wrap := func(c net.Conn) net.Conn { return &flipConn{Conn: c, every: 3, flipped: &flipped} }
	dial, acc, _, _ := sessionPairWith(t, sessOpts{retry: 5 * time.Second, checksum: true, wrap: wrap}, nil, nil)
	pump(t, dial, acc, 96<<20, func(int) {})
	require.Greater(t, acc.Resumes()+dial.Resumes(), 2*maxChecksumFails, "too few corrupted records to pass the limit in all")
}

// TestChecksumFailsInARowFailTheSession: a link that corrupts every large record fails
// the session after maxChecksumFails in a row, with ErrChecksum, never loops for ever.
func TestChecksumFailsInARowFailTheSession(t *testing.T) {
	var flipped atomic.Int64
	wrap := func(c net.Conn) net.Conn { return &flipConn{Conn: c, every: 1, flipped: &flipped} }
	dial, acc, _, _ := sessionPairWith(t, sessOpts{retry: 5 * time.Second, checksum: true, wrap: wrap}, nil, nil)
	data := make([]byte, 4<<20)
	go func() { _, _ = dial.Write(data) }()
	_ = acc.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.ReadFull(acc, make([]byte, len(data)))
	require.ErrorIs(t, err, ErrChecksum)
	require.ErrorContains(t, err, fmt.Sprintf("(%d records failed it in a row)", maxChecksumFails+1))
}

// hdrFlipConn flips a bit of the length in the first record header it writes (its
// first write starts with one), making the length larger than the record.
type hdrFlipConn struct {
	net.Conn
	flipped *atomic.Int64
}

func (c *hdrFlipConn) Write(p []byte) (int, error) {
	if len(p) >= recordHeader && c.flipped.Load() == 0 {
		c.flipped.Add(1)
		q := append([]byte(nil), p...)
		q[1] ^= 0x04 // the length + 1024
		return c.Conn.Write(q)
	}
	return c.Conn.Write(p)
}

func (c *hdrFlipConn) raw() net.Conn { return c.Conn }

// TestChecksumCatchesACorruptedRecordLength: a record whose length was corrupted on
// the way (larger than the record) is caught at its header and resent, never waited
// for: the reader would otherwise wait for bytes the writer never sends (it waits for
// the answer), until the timeout.
func TestChecksumCatchesACorruptedRecordLength(t *testing.T) {
	var flipped atomic.Int64
	wrap := func(c net.Conn) net.Conn { return &hdrFlipConn{Conn: c, flipped: &flipped} }
	dial, acc, _, _ := sessionPairWith(t, sessOpts{retry: 5 * time.Second, checksum: true, wrap: wrap}, nil, nil)
	msg := bytes.Repeat([]byte("abcdefgh"), 125)
	_, err := dial.Write(msg)
	require.NoError(t, err)
	_ = acc.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(acc, got)
	require.NoError(t, err, "a corrupted record length was waited for")
	require.Equal(t, msg, got)
	require.EqualValues(t, 1, flipped.Load())
	require.Equal(t, 1, acc.Resumes())
}

// TestCorruptedReconnectIsRetried: a reconnect whose handshake or answer was
// corrupted on the way (the acceptor's proof does not match: ErrAuth; its delivered
// count is out of range: ErrCountMismatch) is tried again within the window, not
// taken for the peer's refusal: the link resumes and the stream arrives exact.
func TestCorruptedReconnectIsRetried(t *testing.T) {
	for _, bad := range []string{"auth", "count"} {
		t.Run(bad, func(t *testing.T) {
			var attempts atomic.Int64
			redial := func(real func() (net.Conn, uint64, error)) (net.Conn, uint64, error) {
				if attempts.Add(1) > 1 {
					return real()
				}
				if bad == "auth" {
					return nil, 0, fmt.Errorf("reconnect: %w", ErrAuth)
				}
				c, n, err := real()
				return c, n + 1<<40, err // the answer's count, corrupted
			}
			dial, acc, _, _ := sessionPairWith(t, sessOpts{retry: 5 * time.Second, redial: redial}, nil, nil)
			abort(dial.Conn()) // the next write breaks, and the dialler reconnects
			msg := bytes.Repeat([]byte("0123456789"), 100)
			go func() { _, _ = dial.Write(msg) }()
			_ = acc.SetReadDeadline(time.Now().Add(10 * time.Second))
			got := make([]byte, len(msg))
			_, err := io.ReadFull(acc, got)
			require.NoError(t, err)
			require.Equal(t, msg, got)
			require.GreaterOrEqual(t, attempts.Load(), int64(2))
			require.GreaterOrEqual(t, dial.Resumes(), 1)
		})
	}
}

// TestAcceptorsCallAfterALostAnswer: the acceptor took a reconnect and answered, but
// the answer never reached the dialler intact (it tried again: the acceptor counts
// one connection more than the dialler). A later break that the acceptor sees first
// still brings the dialler back when the acceptor calls, never waits out the window.
func TestAcceptorsCallAfterALostAnswer(t *testing.T) {
	var attempts atomic.Int64
	dial, acc, _, _ := sessionPairWith(t, sessOpts{retry: 3 * time.Second, redial: loseFirstAnswer(&attempts)}, nil, nil)
	roundTrip := func(from, to *Session) {
		msg := bytes.Repeat([]byte("x"), 1000)
		go func() { _, _ = from.Write(msg) }()
		_ = to.SetReadDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, len(msg))
		_, err := io.ReadFull(to, got)
		require.NoError(t, err)
		require.Equal(t, msg, got)
	}
	abort(dial.Conn()) // seen by the dialler first: it reconnects twice (the first answer lost)
	roundTrip(dial, acc)
	require.GreaterOrEqual(t, attempts.Load(), int64(2))
	abort(acc.Conn()) // seen by the acceptor first: it calls the dialler
	roundTrip(acc, dial)
}

// dropConn swallows its writes once armed (they report success, as bytes a reset
// then loses on the way would).
type dropConn struct {
	net.Conn
	armed *atomic.Bool
}

func (c *dropConn) Write(p []byte) (int, error) {
	if c.armed.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *dropConn) raw() net.Conn { return c.Conn }

// TestLingerKeepsTheLastBytesResendable: a side that wrote its last bytes and closes
// on purpose, while a reset lost them on the way, first lingers until the peer has
// them: the peer's reconnect still finds the session and gets them resent. Closed at
// once, the peer's reconnect would be refused and its read would fail.
func TestLingerKeepsTheLastBytesResendable(t *testing.T) {
	var armed atomic.Bool
	wrap := func(c net.Conn) net.Conn { return &dropConn{Conn: c, armed: &armed} }
	dial, acc, r0, _ := sessionPairWith(t, sessOpts{retry: 5 * time.Second, wrap: wrap}, nil, nil)
	msg := bytes.Repeat([]byte("last words "), 1000)
	armed.Store(true)
	_, err := dial.Write(msg) // lost on the way
	require.NoError(t, err)
	armed.Store(false)
	lingered := make(chan struct{})
	go func() {
		lingerOne(dial, r0, nil, time.Now().Add(30*time.Second))
		dial.Close()
		close(lingered)
	}()
	time.Sleep(100 * time.Millisecond) // the closing side is lingering
	abort(dial.Conn())                 // the reset: the acceptor calls the dialler back
	_ = acc.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(acc, got)
	require.NoError(t, err)
	require.Equal(t, msg, got)
	select {
	case <-lingered:
	case <-time.After(20 * time.Second):
		t.Fatal("Linger did not return once the peer had every byte")
	}
}

// TestLingerReturnsWhenThePeerIsGone: a peer that no longer has the link (closed) ends
// the wait at once, not at its deadline.
func TestLingerReturnsWhenThePeerIsGone(t *testing.T) {
	dial, acc, _, r1 := sessionPair(t, 5*time.Second, nil, nil)
	_, err := acc.Write([]byte("unread"))
	require.NoError(t, err)
	require.NoError(t, dial.Close())
	done := make(chan struct{})
	go func() { lingerOne(acc, r1, nil, time.Now().Add(time.Hour)); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Linger waited on a peer that had closed the link")
	}
}

// TestChecksumWithoutRetryFailsNamingRank: with no retry window a corrupted record
// fails the session, naming the rank and the connection, and is never handed out.
func TestChecksumWithoutRetryFailsNamingRank(t *testing.T) {
	var flipped atomic.Int64
	wrap := func(c net.Conn) net.Conn { return &flipConn{Conn: c, every: 1, flipped: &flipped} }
	dial, acc, _, _ := sessionPairWith(t, sessOpts{checksum: true, wrap: wrap}, nil, nil)
	data := make([]byte, 64<<10)
	go func() { _, _ = dial.Write(data) }()
	_ = acc.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := acc.Read(make([]byte, len(data)))
	require.Zero(t, n)
	require.ErrorIs(t, err, ErrChecksum)
	require.ErrorContains(t, err, "rank 1, link channel 0")
}

// TestReconnectBadInput: reconnects that must be refused, each with its named error
// on the accepting side, and the link carries on after them.
func TestReconnectBadInput(t *testing.T) {
	dial, acc, r0, _ := sessionPair(t, 5*time.Second, nil, nil)
	addr0 := r0.l.Addr().String()
	dl := func() time.Time { return time.Now().Add(3 * time.Second) }
	served := func() error { // the next refusal (nil: a genuine resume, skipped)
		for {
			select {
			case err := <-r0.served:
				if err != nil {
					return err
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the acceptor refused nothing")
			}
		}
	}
	h := Hello{From: 1, To: 0, Channel: ChannelColl, Link: 7, Resume: true}

	_, _, err := DialResume(addr0, []byte("not the secret!!"), nil, h, dl())
	require.ErrorIs(t, err, ErrAuth, "wrong secret")
	require.ErrorContains(t, served(), "proof of the secret") // the dialler hung up: rank 0 proved its secret, it did not

	stale := h
	stale.Link = 8
	_, _, err = DialResume(addr0, tlsSecret, nil, stale, dl())
	var refused *RefusedError
	require.ErrorAs(t, err, &refused, "stale link id")
	require.ErrorIs(t, served(), ErrStaleLink)

	other := h
	other.Channel = ChannelP2P
	_, _, err = DialResume(addr0, tlsSecret, nil, other, dl())
	require.ErrorAs(t, err, &refused, "the link's id on another channel")
	require.ErrorIs(t, served(), ErrStaleLink)

	counts := h
	counts.Count = 1 << 40 // far more than rank 0 ever sent
	_, _, err = DialResume(addr0, tlsSecret, nil, counts, dl())
	require.ErrorAs(t, err, &refused, "mismatched counts")
	require.Contains(t, refused.Reason, "delivered byte counts do not match")
	require.ErrorIs(t, served(), ErrCountMismatch)

	raw, err := net.Dial("tcp", addr0) // half-open: part of a hello, then silence
	require.NoError(t, err)
	_, _ = raw.Write(resumeHello(1, 0, ChannelColl, 7, 0)[:20])
	require.ErrorIs(t, served(), ErrHalfOpen) // after the real dialler's resume, which the refused one set off
	raw.Close()

	// The refusals broke nothing for good: the real dialler resumes, the stream is exact.
	pump(t, dial, acc, 4<<20, func(int) {})
}

// TestChecksumEmptyWrite: an empty write (a zero-byte frame's stripe) sends no record,
// and the stream goes on.
func TestChecksumEmptyWrite(t *testing.T) {
	dial, acc, _, _ := sessionPairWith(t, sessOpts{retry: 5 * time.Second, checksum: true}, nil, nil)
	n, err := dial.Write(nil)
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = dial.Write([]byte("after"))
	require.NoError(t, err)
	got := make([]byte, 5)
	_ = acc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadFull(acc, got)
	require.NoError(t, err)
	require.Equal(t, "after", string(got))
	require.Zero(t, acc.Resumes())
}

// TestResumeAnswerIsAuthenticated: a reconnect's answer is taken only as written for
// this handshake. A count with one bit flipped on the way that stays in the range the
// dialler holds (before the MAC, a resend from the wrong offset: bytes repeated or
// skipped, unseen even with checksums), the generation changed, or an answer written
// for another handshake (a replay, or a stranger's guess) are all refused.
func TestResumeAnswerIsAuthenticated(t *testing.T) {
	h := Hello{From: 1, To: 0, Link: 7, Resume: true, Gen: 3}
	copy(h.nonces[:], bytes.Repeat([]byte{0xab}, len(h.nonces)))
	answer := func(h Hello, corrupt func(b []byte)) (uint64, uint64, error) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() {
			var buf bytes.Buffer
			conn := &recorder{Conn: a, out: &buf}
			_ = writeAnswer(conn, tlsSecret, h, 'R', 1000, 3, time.Second)
			p := buf.Bytes()
			corrupt(p)
			_, _ = a.Write(p)
		}()
		return readAnswer(b, tlsSecret, Hello{From: 1, To: 0, Link: 7, Resume: true, Gen: 3, nonces: [2 * nonceSize]byte(bytes.Repeat([]byte{0xab}, 2*nonceSize))}, 'R', time.Now().Add(5*time.Second))
	}
	n, gen, err := answer(h, func([]byte) {})
	require.NoError(t, err)
	require.Equal(t, uint64(1000), n)
	require.Equal(t, uint64(3), gen)

	_, _, err = answer(h, func(b []byte) { b[4] ^= 0x08 }) // 1000 -> 1008: in range
	require.ErrorIs(t, err, errBadAnswer)
	_, _, err = answer(h, func(b []byte) { b[12] ^= 0x01 }) // another generation
	require.ErrorIs(t, err, errBadAnswer)
	other := h
	other.nonces[0] ^= 1 // written for another handshake
	_, _, err = answer(other, func([]byte) {})
	require.ErrorIs(t, err, errBadAnswer)
}

// recorder keeps what is written to it instead of sending it.
type recorder struct {
	net.Conn
	out *bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error)      { return r.out.Write(p) }
func (r *recorder) SetWriteDeadline(time.Time) error { return nil }

// TestAcceptorOnlyBreakAfterALostAnswer: after a reconnect whose answer the dialler
// lost (the acceptor installed the connection, the dialler tried again), a break only
// the acceptor sees, while the dialler neither reads nor writes, still resumes: the
// acceptor's call names a generation the dialler has too. With generations counted on
// each side, the call named one the dialler never had, and the acceptor waited out the
// window.
func TestAcceptorOnlyBreakAfterALostAnswer(t *testing.T) {
	var attempts atomic.Int64
	dial, acc, _, _ := sessionPairWith(t, sessOpts{retry: 4 * time.Second, redial: loseFirstAnswer(&attempts)}, nil, nil)
	msg := bytes.Repeat([]byte("y"), 1000)
	abort(dial.Conn()) // seen by the dialler: it reconnects twice (the first answer lost)
	go func() { _, _ = dial.Write(msg) }()
	_ = acc.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadFull(acc, make([]byte, len(msg)))
	require.NoError(t, err)
	require.GreaterOrEqual(t, attempts.Load(), int64(2))
	time.Sleep(200 * time.Millisecond) // the dialler goes idle

	acc.mu.Lock() // a break the acceptor alone sees (its reader failed, say)
	acc.breakLocked(acc.gen, errors.New("test: the acceptor's connection failed"))
	acc.mu.Unlock()
	require.Eventually(t, func() bool { down, _ := acc.Down(); return !down }, 3*time.Second, 10*time.Millisecond,
		"the acceptor's call did not bring the idle dialler back")
	require.NoError(t, acc.Err())
}

// TestReconnectWithAnotherCertificateIsRefused: under TLS a reconnect must show the
// very certificate the session first connected with: another one the same CA signed
// for the same name (a stolen name, a re-issued key) is refused before the acceptor
// answers, and the real session carries on.
func TestReconnectWithAnotherCertificateIsRefused(t *testing.T) {
	ca, secs := groupTLS(t, 2)
	dial, acc, r0, _ := sessionPair(t, 5*time.Second, secs[0], secs[1])
	f, err := ca.Leaf("rank-1", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	impostor, err := LoadTLS(f.Cert, f.Key, ca.CertPEM, time.Now())
	require.NoError(t, err)
	_, delivered := dial.Counts()
	h := Hello{From: 1, To: 0, Channel: ChannelColl, Link: 7, Resume: true, Count: delivered, Gen: 1}
	_, _, err = DialResume(r0.l.Addr().String(), tlsSecret, impostor, h, time.Now().Add(5*time.Second))
	var refused *RefusedError
	require.ErrorAs(t, err, &refused, "a certificate of the same name from the same CA took over the link")
	require.ErrorContains(t, err, "not the one it connected with")
	select {
	case served := <-r0.served:
		require.ErrorIs(t, served, ErrStaleLink)
	case <-time.After(5 * time.Second):
		t.Fatal("the acceptor did not refuse")
	}
	require.Zero(t, acc.Resumes(), "the acceptor resumed with the impostor")
	pump(t, dial, acc, 1<<20, func(int) {})
}

// lingerOne lingers s, a session of the rank other than peer, asking peer (LingerPeer).
func lingerOne(s *Session, peer *sessRank, sec *TLS, deadline time.Time) {
	addr := peer.l.Addr().String()
	LingerPeer([]*Session{s}, func(links []uint64, dl time.Time) ([]uint64, error) {
		return AskLinger(addr, tlsSecret, sec, Hello{From: 1 - peer.rank, To: peer.rank}, links, dl)
	}, deadline)
}

// loseFirstAnswer is a sessOpts.redial whose first reconnect the acceptor installs but
// whose answer the dialler never sees (it tries again); attempts counts reconnects.
func loseFirstAnswer(attempts *atomic.Int64) func(real func() (net.Conn, uint64, error)) (net.Conn, uint64, error) {
	return func(real func() (net.Conn, uint64, error)) (net.Conn, uint64, error) {
		c, n, err := real()
		if attempts.Add(1) == 1 && err == nil {
			abort(c)
			return nil, 0, errors.New("not a reconnect answer (bad magic)")
		}
		return c, n, err
	}
}
