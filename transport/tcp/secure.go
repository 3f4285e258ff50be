package tcp

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// How TLS and plain ranks tell each other apart, so that a mismatch is refused at
// connect with the rank and the reason on both sides, never by a hang or by garbage:
//
//	TLS dialer   -> acceptor: preamble (magic "TLS", version, from, to), in clear
//	             then the TLS 1.3 handshake, then the HMAC handshake inside TLS
//	plain dialer -> acceptor: the HMAC hello (handshake.go), in clear
//
// A TLS acceptor that reads a plain hello, or a plain acceptor that reads a preamble,
// answers with a refusal (refuseMagic, a length byte, the reason) and closes. A plain
// dialer finds the refusal where it expected the acceptor's proof; a TLS dialer where
// it expected the server's first TLS record (crypto/tls reports a record header that
// is not TLS, and the dialer reads the reason after it). The preamble's ranks are
// claims, used only to name the peer in errors; the HMAC hello inside TLS must repeat
// them.
const (
	tlsMagic     = 0x474e4354 // "GNCT"
	preambleSize = 16
)

// refuseMagic starts a refusal; its first byte is no TLS record type.
var refuseMagic = [4]byte{'G', 'N', 'C', 'R'}

// RefusedError is a peer's refusal of this rank's connection.
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return "refused by the peer: " + e.Reason }

// refuse sends a refusal with reason (cut to 255 bytes) and leaves conn to the caller.
func refuse(conn net.Conn, reason string) {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	msg := append(refuseMagic[:], byte(len(reason)))
	_, _ = conn.Write(append(msg, reason...))
}

// readRefusal reads the rest of a refusal whose first five bytes were head from r.
func readRefusal(r io.Reader, head []byte) error {
	reason := make([]byte, head[4])
	if _, err := io.ReadFull(r, reason); err != nil {
		return &RefusedError{Reason: "(the reason was cut short)"}
	}
	return &RefusedError{Reason: string(reason)}
}

// headConn keeps the first bytes read from its connection: crypto/tls reads ahead of
// a record header that is not TLS, and a refusal's reason is in what it read.
type headConn struct {
	net.Conn
	head []byte
}

func (c *headConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if len(c.head) < 5+255 {
		c.head = append(c.head, p[:min(n, 5+255-len(c.head))]...)
	}
	return n, err
}

// isRefusal reports whether b starts with refuseMagic.
func isRefusal(b []byte) bool { return len(b) >= 4 && [4]byte(b[:4]) == refuseMagic }

// secureDial runs the dialling side on a fresh connection: TLS first when t is set,
// then the HMAC handshake. It returns the connection to use from now on.
func secureDial(conn net.Conn, secret []byte, t *TLS, h *Hello, deadline time.Time) (net.Conn, error) {
	if t == nil {
		return conn, dialHandshake(conn, secret, h, deadline)
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	var pre [preambleSize]byte
	binary.LittleEndian.PutUint32(pre[0:], tlsMagic)
	binary.LittleEndian.PutUint32(pre[4:], protoVersion)
	binary.LittleEndian.PutUint32(pre[8:], uint32(int32(h.From)))
	binary.LittleEndian.PutUint32(pre[12:], uint32(int32(h.To)))
	if _, err := conn.Write(pre[:]); err != nil {
		return nil, fmt.Errorf("TLS preamble: %w", err)
	}
	raw := &batchConn{Conn: conn}
	head := &headConn{Conn: raw}
	tc := tls.Client(head, t.config(false))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && isRefusal(rh.RecordHeader[:]) {
			return nil, readRefusal(io.MultiReader(bytes.NewReader(head.head[5:]), conn), rh.RecordHeader[:])
		}
		return nil, fmt.Errorf("TLS handshake: %w", explainTLS(err))
	}
	if err := dialHandshake(tc, secret, h, deadline); err != nil {
		return nil, explainTLS(err)
	}
	return &tlsConn{Conn: tc, raw: raw}, nil
}

// Accept runs the accepting side on a connection a listener returned: with t set, the
// preamble, TLS (the peer's certificate must verify against t's CA) and the HMAC
// handshake inside it; without, the HMAC handshake alone. It returns the connection to
// use from now on and the dialer's proven Hello. Its errors name the rank the dialer
// claims to be, where it said. Only a connection that passed gets a link's socket
// buffers (see Accepted).
func Accept(conn net.Conn, secret []byte, t *TLS, deadline time.Time) (net.Conn, Hello, error) {
	c, h, err := accept(conn, secret, t, deadline)
	if err == nil {
		if tc := rawTCP(c); tc != nil {
			grow(tc)
		}
	}
	return c, h, err
}

// accept is Accept before the buffers.
func accept(conn net.Conn, secret []byte, t *TLS, deadline time.Time) (net.Conn, Hello, error) {
	if t == nil {
		h, err := AcceptHandshake(conn, secret, deadline)
		return conn, h, err
	}
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, Hello{}, err
	}
	var pre [preambleSize]byte
	if _, err := io.ReadFull(conn, pre[:]); err != nil {
		return nil, Hello{}, acceptErr("TLS preamble", err)
	}
	from := int(int32(binary.LittleEndian.Uint32(pre[8:])))
	switch binary.LittleEndian.Uint32(pre[0:]) {
	case tlsMagic:
	case helloMagic:
		refuse(conn, "this rank speaks plain TCP but the peer uses TLS (GONCCL_TLS=1): set GONCCL_TLS=1 and the certificates on every rank")
		return nil, Hello{From: from}, fmt.Errorf("rank %d speaks plain TCP to a TLS group (GONCCL_TLS is not 1 there): refused", from)
	default:
		return nil, Hello{}, errors.New("handshake: not a gonccl peer (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(pre[4:]); v != protoVersion {
		return nil, Hello{}, fmt.Errorf("handshake: rank %d speaks protocol %d, this rank %d", from, v, protoVersion)
	}
	raw := &batchConn{Conn: conn}
	tc := tls.Server(raw, t.config(true))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		return nil, Hello{From: from}, fmt.Errorf("rank %d: TLS handshake failed: %w", from, explainTLS(err))
	}
	h, err := AcceptHandshake(tc, secret, deadline)
	if err != nil {
		return nil, Hello{From: from}, fmt.Errorf("rank %d (certificate %s): %w", from, PeerName(tc), err)
	}
	if h.From != from || h.To != int(int32(binary.LittleEndian.Uint32(pre[12:]))) {
		return nil, h, fmt.Errorf("rank %d claimed to be rank %d before TLS", h.From, from)
	}
	return &tlsConn{Conn: tc, raw: raw}, h, nil
}

// explainTLS adds what to do to a TLS alert from the peer.
func explainTLS(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "remote error" {
		return fmt.Errorf("the peer refused this rank's certificate (%w): is it signed by the CA the peer trusts (GONCCL_TLS_CA)?", err)
	}
	return err
}
