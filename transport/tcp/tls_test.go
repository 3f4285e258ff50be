package tcp

import (
	"bytes"
	"fmt"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gonccl/gonccl/internal/testcert"
	"github.com/gonccl/gonccl/transport"
)

// Tests of GONCCL_TLS at the connection level, with a CA and certificates made by the
// test (package testcert).

var tlsSecret = []byte("0123456789abcdef")

// groupTLS makes a CA and n certificates it signs ("rank-0" ...), loaded.
func groupTLS(t *testing.T, n int) (*testcert.CA, []*TLS) {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcert.NewCA(dir, "group")
	require.NoError(t, err)
	var out []*TLS
	for i := 0; i < n; i++ {
		f, err := ca.Leaf("rank-"+string(rune('0'+i)), time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
		require.NoError(t, err)
		sec, err := LoadTLS(f.Cert, f.Key, ca.CertPEM, time.Now())
		require.NoError(t, err)
		out = append(out, sec)
	}
	return ca, out
}

// connectOnce dials a loopback listener with dialer's TLS (nil: plain) while it
// accepts with acceptor's, and returns both ends' results.
type connected struct {
	dial, acc       net.Conn
	h               Hello
	dialErr, accErr error
	took            time.Duration
}

func connectOnce(t *testing.T, dialer, acceptor *TLS, h Hello) connected {
	t.Helper()
	l, err := Listen(Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer l.Close()
	var res connected
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := l.AcceptTCP()
		if err != nil {
			res.accErr = err
			return
		}
		Accepted(c)
		res.acc, res.h, res.accErr = Accept(c, tlsSecret, acceptor, time.Now().Add(5*time.Second))
		if res.accErr != nil {
			c.Close()
		}
	}()
	start := time.Now()
	res.dial, res.dialErr = DialOnce(l.Addr().String(), tlsSecret, dialer, h, time.Now().Add(5*time.Second))
	<-done
	res.took = time.Since(start)
	t.Cleanup(func() {
		for _, c := range []net.Conn{res.dial, res.acc} {
			if c != nil {
				c.Close()
			}
		}
	})
	return res
}

func TestTLSConnectsAndCarriesFrames(t *testing.T) {
	_, sec := groupTLS(t, 2)
	h := Hello{From: 1, To: 0, Channel: ChannelColl, Epoch: 2}
	r := connectOnce(t, sec[1], sec[0], h)
	require.NoError(t, r.dialErr)
	require.NoError(t, r.accErr)
	r.h.nonces = [2 * nonceSize]byte{}
	require.Equal(t, h, r.h)
	require.Contains(t, PeerName(r.acc), "CN=rank-1")
	require.Contains(t, PeerName(r.dial), "CN=rank-0")
	require.Empty(t, PeerName(&net.TCPConn{}))

	a, b := NewStreamLink(0, r.dial), NewStreamLink(1, r.acc)
	for _, n := range []int{0, 100, 3 << 20} {
		p := randomBytes(rand.New(rand.NewSource(int64(n))), n)
		got := make([]byte, n)
		hdr := transport.Header{Seq: uint64(n), Count: uint64(n)}
		errc := make(chan error, 1)
		go func() { errc <- a.Send(&hdr, p, time.Now().Add(5*time.Second)) }()
		require.NoError(t, b.Recv(&hdr, got, time.Now().Add(5*time.Second)))
		require.NoError(t, <-errc)
		require.Equal(t, p, got)
	}
}

func TestTLSSecretStillChecked(t *testing.T) {
	_, sec := groupTLS(t, 2)
	l, err := Listen(Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer l.Close()
	go func() {
		c, err := l.AcceptTCP()
		if err == nil {
			_, _, _ = Accept(c, tlsSecret, sec[0], time.Now().Add(5*time.Second))
			c.Close()
		}
	}()
	// A valid certificate without the communicator's secret does not join.
	_, err = DialOnce(l.Addr().String(), []byte("wrong secret 123"), sec[1], Hello{From: 1}, time.Now().Add(5*time.Second))
	require.ErrorIs(t, err, ErrAuth)
}

func TestTLSStrangerIsRefused(t *testing.T) {
	_, sec := groupTLS(t, 1)
	dir := t.TempDir()
	f, err := testcert.SelfSigned(dir, "stranger")
	require.NoError(t, err)
	// The stranger trusts the group's CA (it is public), but the CA did not sign it.
	stranger, err := LoadTLS(f.Cert, f.Key, sec[0].CAFile, time.Now())
	require.NoError(t, err)
	require.ErrorContains(t, stranger.SignedByCA(), "unknown authority")

	r := connectOnce(t, stranger, sec[0], Hello{From: 5, To: 0})
	t.Logf("acceptor: %v\ndialer: %v", r.accErr, r.dialErr)
	require.ErrorContains(t, r.accErr, "rank 5: TLS handshake")
	require.ErrorContains(t, r.accErr, "CN=stranger")
	require.ErrorContains(t, r.accErr, "certificate signed by unknown authority")
	require.ErrorContains(t, r.dialErr, "the peer refused this rank's certificate")
	require.Less(t, r.took, 3*time.Second)

	// A group member refuses a server certificate its CA did not sign, too.
	own, err := LoadTLS(f.Cert, f.Key, f.Cert, time.Now()) // trusts only itself
	require.NoError(t, err)
	r = connectOnce(t, sec[0], own, Hello{From: 0, To: 5})
	require.ErrorContains(t, r.dialErr, "certificate signed by unknown authority")
	require.ErrorContains(t, r.accErr, "rank 0: TLS handshake")
}

func TestTLSAndPlainRefuseEachOther(t *testing.T) {
	_, sec := groupTLS(t, 1)
	for _, tc := range []struct {
		name             string
		dialer, acceptor *TLS
		dialSays, accSay string
	}{
		{"plain dials TLS", nil, sec[0], "this rank speaks plain TCP but the peer uses TLS", "rank 3 speaks plain TCP to a TLS group"},
		{"TLS dials plain", sec[0], nil, "this rank uses TLS (GONCCL_TLS=1) but the peer speaks plain TCP", "rank 3 speaks TLS (GONCCL_TLS=1 there) to a plain TCP rank"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := connectOnce(t, tc.dialer, tc.acceptor, Hello{From: 3, To: 0})
			t.Logf("acceptor: %v\ndialer: %v", r.accErr, r.dialErr)
			var refused *RefusedError
			require.ErrorAs(t, r.dialErr, &refused)
			require.ErrorContains(t, r.dialErr, tc.dialSays)
			require.ErrorContains(t, r.accErr, tc.accSay)
			require.Less(t, r.took, 3*time.Second, "refused at once, not at the deadline")
		})
	}
}

func TestLoadTLSErrors(t *testing.T) {
	ca, sec := groupTLS(t, 2)
	dir := t.TempDir()
	expired, err := ca.Leaf("old", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	future, err := ca.Leaf("future", time.Now().Add(24*time.Hour), time.Now().Add(48*time.Hour))
	require.NoError(t, err)
	notPEM := filepath.Join(dir, "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))
	unreadable := filepath.Join(dir, "missing.pem")
	a, b := sec[0], sec[1]
	for _, tc := range []struct {
		name, cert, key, ca, want string
	}{
		{"expired", expired.Cert, expired.Key, ca.CertPEM, "expired on"},
		{"not yet valid", future.Cert, future.Key, ca.CertPEM, "is not valid before"},
		{"key of another certificate", a.CertFile, b.KeyFile, ca.CertPEM, "private key does not match public key"},
		{"unreadable certificate", unreadable, a.KeyFile, ca.CertPEM, "missing.pem: no such file"},
		{"unreadable CA", a.CertFile, a.KeyFile, unreadable, "GONCCL_TLS_CA"},
		{"CA not PEM", a.CertFile, a.KeyFile, notPEM, "holds no PEM certificate"},
		{"no key given", a.CertFile, "", ca.CertPEM, "needs GONCCL_TLS_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadTLS(tc.cert, tc.key, tc.ca, time.Now())
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// tapProxy forwards connections from its listener to target and keeps a copy of
// every byte that crosses it, both ways.
type tapProxy struct {
	l      *net.TCPListener
	target string
	mu     sync.Mutex
	seen   bytes.Buffer
	wg     sync.WaitGroup
}

func newTapProxy(t *testing.T, target string) *tapProxy {
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	p := &tapProxy{l: l, target: target}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			go p.pump(up, c)
			go p.pump(c, up)
		}
	}()
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *tapProxy) pump(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			p.seen.Write(buf[:n])
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			src.Close()
			dst.Close()
			return
		}
	}
}

func (p *tapProxy) captured() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.seen.Bytes())
}

// TestTLSHidesTensorBytes sends a tensor-sized frame over a two-connection striped
// link through a proxy that records the wire: with TLS none of the payload shows,
// while plain TCP (the same test) shows it, so the check can fail.
func TestTLSHidesTensorBytes(t *testing.T) {
	_, sec := groupTLS(t, 2)
	for _, tc := range []struct {
		name       string
		a, b       *TLS
		wantInWire bool
	}{{"plain", nil, nil, true}, {"tls", sec[1], sec[0], false}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Listen(Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)})
			require.NoError(t, err)
			defer l.Close()
			proxy := newTapProxy(t, l.Addr().String())
			const socks = 2
			accepted := make(chan net.Conn, socks)
			go func() {
				for i := 0; i < socks; i++ {
					c, err := l.AcceptTCP()
					if err != nil {
						return
					}
					sc, _, err := Accept(c, tlsSecret, tc.b, time.Now().Add(5*time.Second))
					if err != nil {
						c.Close()
						accepted <- nil
						continue
					}
					accepted <- sc
				}
			}()
			var mine, theirs []net.Conn
			for i := 0; i < socks; i++ {
				c, err := DialOnce(proxy.l.Addr().String(), tlsSecret, tc.a, Hello{From: 1, To: 0, Channel: CollChannel(i)}, time.Now().Add(5*time.Second))
				require.NoError(t, err)
				mine = append(mine, c)
				theirs = append(theirs, <-accepted)
				require.NotNil(t, theirs[i])
			}
			a, err := NewStripedLink(0, mine, 2)
			require.NoError(t, err)
			b, err := NewStripedLink(1, theirs, 1)
			require.NoError(t, err)
			defer a.Close()
			defer b.Close()

			p := randomBytes(rand.New(rand.NewSource(7)), 1<<20)
			got := make([]byte, len(p))
			hdr := transport.Header{Seq: 1, Count: uint64(len(p))}
			errc := make(chan error, 1)
			go func() { errc <- a.Send(&hdr, p, time.Now().Add(5*time.Second)) }()
			require.NoError(t, b.Recv(&hdr, got, time.Now().Add(5*time.Second)))
			require.NoError(t, <-errc)
			require.Equal(t, p, got)

			wire := proxy.captured()
			require.Greater(t, len(wire), len(p), "the proxy saw the frame")
			// Any 32 bytes of the payload, at 64 places across both stripes.
			shown := 0
			for off := 0; off+32 <= len(p); off += len(p) / 64 {
				if bytes.Contains(wire, p[off:off+32]) {
					shown++
				}
			}
			if tc.wantInWire {
				require.Equal(t, 64, shown, "plain TCP carries the payload in clear")
			} else {
				require.Zero(t, shown, "TLS let %d pieces of the payload through in clear", shown)
			}
		})
	}
}

// BenchmarkLinkTLS moves 64 MiB frames one way over loopback, plain and over TLS,
// on one and on two connections: what TLS costs the link itself.
func BenchmarkLinkTLS(b *testing.B) {
	t := &testing.T{}
	_, sec := groupTLS(t, 2)
	for _, socks := range []int{1, 2} {
		for _, mode := range []struct {
			name string
			a, b *TLS
		}{{"plain", nil, nil}, {"tls", sec[1], sec[0]}} {
			b.Run(fmt.Sprintf("%s/socks=%d", mode.name, socks), func(b *testing.B) {
				l, err := Listen(Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)})
				require.NoError(b, err)
				defer l.Close()
				accepted := make(chan net.Conn, socks)
				go func() {
					for i := 0; i < socks; i++ {
						c, err := l.AcceptTCP()
						if err != nil {
							return
						}
						Accepted(c)
						sc, _, _ := Accept(c, tlsSecret, mode.b, time.Now().Add(5*time.Second))
						accepted <- sc
					}
				}()
				var mine, theirs []net.Conn
				for i := 0; i < socks; i++ {
					c, err := DialOnce(l.Addr().String(), tlsSecret, mode.a, Hello{From: 1, Channel: CollChannel(i)}, time.Now().Add(5*time.Second))
					require.NoError(b, err)
					mine, theirs = append(mine, c), append(theirs, <-accepted)
				}
				tx, err := NewStripedLink(0, mine, socks)
				require.NoError(b, err)
				rx, err := NewStripedLink(1, theirs, 1)
				require.NoError(b, err)
				defer tx.Close()
				defer rx.Close()
				p, got := make([]byte, 64<<20), make([]byte, 64<<20)
				hdr := transport.Header{Count: uint64(len(p))}
				b.SetBytes(int64(len(p)))
				b.ResetTimer()
				cpu0 := cpuTime()
				for i := 0; i < b.N; i++ {
					errc := make(chan error, 1)
					go func() { errc <- tx.Send(&hdr, p, time.Now().Add(time.Minute)) }()
					require.NoError(b, rx.Recv(&hdr, got, time.Now().Add(time.Minute)))
					require.NoError(b, <-errc)
				}
				// CPU time (both ends) is steadier than wall time on a shared machine.
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e6, "cpu-ms/op")
			})
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Closing a TLS connection whose peer stopped reading returns at once: no close_notify
// alert waits for room in a full socket.
func TestTLSCloseDoesNotWaitForPeer(t *testing.T) {
	_, sec := groupTLS(t, 2)
	r := connectOnce(t, sec[1], sec[0], Hello{From: 1, To: 0})
	require.NoError(t, r.dialErr)
	require.NoError(t, r.accErr)
	// Fill the socket buffers both ways round: the peer reads nothing.
	require.NoError(t, r.dial.SetWriteDeadline(time.Now().Add(300*time.Millisecond)))
	p := make([]byte, 1<<20)
	for {
		if _, err := r.dial.Write(p); err != nil {
			require.ErrorIs(t, err, os.ErrDeadlineExceeded)
			break
		}
	}
	require.NoError(t, r.dial.SetWriteDeadline(time.Time{}))
	start := time.Now()
	require.NoError(t, r.dial.Close())
	require.Less(t, time.Since(start), time.Second)
}
