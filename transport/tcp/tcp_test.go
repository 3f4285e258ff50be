package tcp

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestIfaceFilter(t *testing.T) {
	cases := []struct {
		spec, name string
		want       bool
	}{
		{"eth", "eth0", true},
		{"eth", "ib0", false},
		{"^docker,lo", "docker0", false},
		{"^docker,lo", "eth0", true},
		{"=eth0", "eth0", true},
		{"=eth0", "eth01", false},
		{"^=lo", "lo", false},
		{"^=lo", "lo1", true},
		{"ib,eth", "ib3", true},
	}
	for _, c := range cases {
		require.Equal(t, c.want, parseIfaceFilter(c.spec).matches(c.name), "%q vs %q", c.spec, c.name)
	}
}

func TestSelectInterface(t *testing.T) {
	ifc, err := SelectInterface("")
	require.NoError(t, err)
	require.NotNil(t, ifc.IP)
	ifc, err = SelectInterface("=lo")
	require.NoError(t, err)
	require.True(t, ifc.IP.IsLoopback())
	_, err = SelectInterface("=nosuchiface0")
	require.ErrorContains(t, err, "GONCCL_SOCKET_IFNAME")
}

func TestHandshake(t *testing.T) {
	secret := []byte("0123456789abcdef")
	l, err := Listen(Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer l.Close()
	type res struct {
		h   Hello
		err error
	}
	accepted := make(chan res, 3)
	go func() {
		for {
			c, err := l.AcceptTCP()
			if err != nil {
				return
			}
			h, err := AcceptHandshake(c, secret, time.Now().Add(2*time.Second))
			accepted <- res{h, err}
			c.Close()
		}
	}()
	dl := time.Now().Add(2 * time.Second)

	c, err := Dial(l.Addr().String(), secret, nil, Hello{From: 3, To: 1}, dl)
	require.NoError(t, err)
	c.Close()
	r := <-accepted
	require.NoError(t, r.err)
	r.h.nonces = [2 * nonceSize]byte{}
	require.Equal(t, Hello{From: 3, To: 1}, r.h)

	c, err = Dial(l.Addr().String(), secret, nil, Hello{From: 2, To: 0, Channel: ChannelP2P, Epoch: 7}, dl)
	require.NoError(t, err)
	c.Close()
	r = <-accepted
	require.NoError(t, r.err)
	r.h.nonces = [2 * nonceSize]byte{}
	require.Equal(t, Hello{From: 2, To: 0, Channel: ChannelP2P, Epoch: 7}, r.h)

	_, err = Dial(l.Addr().String(), []byte("wrong secret 123"), nil, Hello{From: 2, To: 1}, dl)
	require.ErrorIs(t, err, ErrAuth)
	r = <-accepted
	require.Error(t, r.err)

	raw, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	_, _ = raw.Write([]byte("GET / HTTP/1.0\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxx"))
	r = <-accepted
	require.ErrorContains(t, r.err, "not a gonccl peer")
	raw.Close()
}

// Listen binds to the selected interface's address only: the port is not reachable
// through the machine's other addresses.
func TestListenBindsToTheInterfaceOnly(t *testing.T) {
	lo := Interface{Name: "lo", IP: net.IPv4(127, 0, 0, 1)}
	l, err := Listen(lo)
	require.NoError(t, err)
	defer l.Close()
	addr := l.Addr().(*net.TCPAddr)
	require.True(t, addr.IP.Equal(lo.IP), "listening on %s", addr)
	other, err := SelectInterface("^lo")
	if err != nil || other.IP.IsLoopback() {
		t.Skip("no non-loopback interface to check from")
	}
	c, err := net.DialTimeout("tcp", net.JoinHostPort(other.IP.String(), fmt.Sprint(addr.Port)), 2*time.Second)
	if err == nil {
		c.Close()
	}
	require.Error(t, err, "a listener on %s accepted a connection through %s", lo, other)

	l2, err := Listen(other)
	require.NoError(t, err)
	defer l2.Close()
	require.True(t, l2.Addr().(*net.TCPAddr).IP.Equal(other.IP))
	c, err = net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", fmt.Sprint(l2.Addr().(*net.TCPAddr).Port)), 2*time.Second)
	if err == nil {
		c.Close()
	}
	require.Error(t, err, "a listener on %s accepted a connection through loopback", other)
}
