package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"
)

// SecretSize is the length of a communicator's shared secret.
const SecretSize = 16

// RootRank stands for the bootstrap root in a handshake's rank fields.
const RootRank = -1

// ErrAuth means the other end could not prove it knows the communicator's secret.
var ErrAuth = errors.New("handshake failed: the peer does not know the communicator's secret")

// ErrHalfOpen means a connection's handshake stalled: the client sent part of it, or
// nothing, and went silent (a half-open connection, or a slow-loris client).
var ErrHalfOpen = errors.New("half-open connection")

const (
	helloMagic   = 0x474e4348 // "GNCH"
	protoVersion = 5
	nonceSize    = 16
	macSize      = sha256.Size
	helloFields  = 4 + 4 + 4 + 4 + 4 + 4 + 8 + 4 + 8 + 8 // magic .. gen: what the MAC covers after the ranks
	helloSize    = helloFields + nonceSize
)

// Channels: a pair of ranks holds one connection per channel.
const (
	// ChannelColl carries collectives (and the bootstrap), driven by the executor.
	ChannelColl = 0
	// ChannelP2P carries point-to-point messages, read by its own goroutine.
	ChannelP2P = 1
	// ChannelCall asks the acceptor to connect to the dialer (connections made on
	// demand are always dialled by the higher rank of a pair; the lower one calls). The
	// connection carries nothing after the handshake.
	ChannelCall = 0xff
)

// CollChannel is the channel of connection i of a pair's collective link: connection 0
// is ChannelColl, the others (several sockets per peer) follow ChannelP2P.
func CollChannel(i int) uint8 {
	if i == 0 {
		return ChannelColl
	}
	return uint8(ChannelP2P + i)
}

// CollSocket is the inverse of CollChannel: which connection of the collective link
// channel ch is, or -1 if ch is not a collective channel.
func CollSocket(ch uint8) int {
	switch {
	case ch == ChannelColl:
		return 0
	case ch > ChannelP2P:
		return int(ch) - ChannelP2P
	}
	return -1
}

// Hello is what the dialling side announces: who it is, whom it wants, which of the
// pair's connections this one is, and the communicator generation (epoch) it belongs
// to, so that a rank of an older generation is told apart and turned away.
type Hello struct {
	From, To int
	Channel  uint8
	Epoch    uint32
	// Link is the id of the session (see session.go) the connection carries, chosen
	// by the dialler at the first connect; 0 for a connection that carries none.
	Link uint64
	// Resume marks a reconnect of session Link: on a data channel, this connection
	// replaces the broken one and Count is the bytes the dialler has delivered; on
	// ChannelCall, the lower rank asks the dialler to reconnect, Count being the
	// session's generation that broke.
	Resume bool
	Count  uint64
	// Gen is, on a reconnect, the generation the new connection will be (the
	// dialler's count of connections so far); the acceptor adopts it, so that both
	// ends name a connection alike.
	Gen uint64
	// Checksum: the session's bytes travel in records with a CRC32C each (see
	// checksum.go); the dialler's setting decides for the connection.
	Checksum bool

	// nonces are the handshake's (the dialler's, then the acceptor's): what a
	// reconnect's answer is authenticated with (see resume.go). Not on the wire.
	nonces [2 * nonceSize]byte
}

// The handshake, both ends proving knowledge of the secret without revealing it:
//
//	dialer   -> acceptor: magic, version, from, to, channel, epoch, link, flags, count, nonceD
//	acceptor -> dialer:   nonceA, HMAC(secret, "A" | nonceD | nonceA | hello's fields)
//	dialer   -> acceptor: HMAC(secret, "D" | nonceA | nonceD | hello's fields)
//
// Fresh nonces on both sides make a recorded handshake useless to replay. A reconnect
// (Resume) runs the same handshake: the link id and the counts are covered by both MACs.

// DialHandshake runs the dialling side of the handshake on conn.
func DialHandshake(conn net.Conn, secret []byte, h Hello, deadline time.Time) error {
	return dialHandshake(conn, secret, &h, deadline)
}

// dialHandshake is DialHandshake that keeps the nonces in h.
func dialHandshake(conn net.Conn, secret []byte, hp *Hello, deadline time.Time) error {
	h := *hp
	if err := conn.SetDeadline(deadline); err != nil {
		return err
	}
	defer conn.SetDeadline(time.Time{})
	var hello [helloSize]byte
	binary.LittleEndian.PutUint32(hello[0:], helloMagic)
	binary.LittleEndian.PutUint32(hello[4:], protoVersion)
	binary.LittleEndian.PutUint32(hello[8:], uint32(int32(h.From)))
	binary.LittleEndian.PutUint32(hello[12:], uint32(int32(h.To)))
	binary.LittleEndian.PutUint32(hello[16:], uint32(h.Channel))
	binary.LittleEndian.PutUint32(hello[20:], h.Epoch)
	putResume(hello[24:], h)
	nonceD := hello[helloFields:]
	if _, err := rand.Read(nonceD); err != nil {
		return err
	}
	if _, err := conn.Write(hello[:]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	var reply [nonceSize + macSize]byte
	if _, err := io.ReadFull(conn, reply[:5]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if isRefusal(reply[:]) {
		return readRefusal(conn, reply[:5])
	}
	if _, err := io.ReadFull(conn, reply[5:]); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	nonceA := reply[:nonceSize]
	if !hmac.Equal(reply[nonceSize:], mac(secret, 'A', nonceD, nonceA, h)) {
		return ErrAuth
	}
	if _, err := conn.Write(mac(secret, 'D', nonceA, nonceD, h)); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	copy(hp.nonces[:nonceSize], nonceD)
	copy(hp.nonces[nonceSize:], nonceA)
	return nil
}

// AcceptHandshake runs the accepting side on conn and returns the dialer's Hello once
// it has proven knowledge of the secret.
func AcceptHandshake(conn net.Conn, secret []byte, deadline time.Time) (Hello, error) {
	if err := conn.SetDeadline(deadline); err != nil {
		return Hello{}, err
	}
	defer conn.SetDeadline(time.Time{})
	var hello [helloSize]byte
	// Magic and version first: a stranger or an older build is told so at once.
	if _, err := io.ReadFull(conn, hello[:8]); err != nil {
		return Hello{}, acceptErr("hello", err)
	}
	if binary.LittleEndian.Uint32(hello[0:]) == tlsMagic {
		if _, err := io.ReadFull(conn, hello[8:preambleSize]); err != nil {
			return Hello{}, acceptErr("hello", err)
		}
		from := int(int32(binary.LittleEndian.Uint32(hello[8:])))
		refuse(conn, "this rank uses TLS (GONCCL_TLS=1) but the peer speaks plain TCP: set GONCCL_TLS=1 and the certificates on every rank")
		return Hello{From: from}, fmt.Errorf("rank %d speaks TLS (GONCCL_TLS=1 there) to a plain TCP rank (GONCCL_TLS is not 1 here): refused", from)
	}
	if binary.LittleEndian.Uint32(hello[0:]) != helloMagic {
		return Hello{}, fmt.Errorf("handshake: not a gonccl peer (bad magic)")
	}
	if v := binary.LittleEndian.Uint32(hello[4:]); v != protoVersion {
		return Hello{}, fmt.Errorf("handshake: peer speaks protocol %d, this rank %d", v, protoVersion)
	}
	if _, err := io.ReadFull(conn, hello[8:]); err != nil {
		return Hello{}, acceptErr("hello", err)
	}
	ch := binary.LittleEndian.Uint32(hello[16:])
	if ch > 0xff {
		return Hello{}, fmt.Errorf("handshake: bad channel %d", ch)
	}
	h := Hello{
		From:    int(int32(binary.LittleEndian.Uint32(hello[8:]))),
		To:      int(int32(binary.LittleEndian.Uint32(hello[12:]))),
		Channel: uint8(ch),
		Epoch:   binary.LittleEndian.Uint32(hello[20:]),
	}
	if err := getResume(hello[24:], &h); err != nil {
		return Hello{}, err
	}
	nonceD := hello[helloFields:]
	var reply [nonceSize + macSize]byte
	nonceA := reply[:nonceSize]
	if _, err := rand.Read(nonceA); err != nil {
		return Hello{}, err
	}
	copy(reply[nonceSize:], mac(secret, 'A', nonceD, nonceA, h))
	if _, err := conn.Write(reply[:]); err != nil {
		return Hello{}, fmt.Errorf("handshake: %w", err)
	}
	var proof [macSize]byte
	if _, err := io.ReadFull(conn, proof[:]); err != nil {
		return Hello{}, acceptErr("proof of the secret", err)
	}
	if !hmac.Equal(proof[:], mac(secret, 'D', nonceA, nonceD, h)) {
		return Hello{}, ErrAuth
	}
	copy(h.nonces[:nonceSize], nonceD)
	copy(h.nonces[nonceSize:], nonceA)
	return h, nil
}

// putResume writes h's session fields (link, flags, count, gen: 28 bytes) into b; flags:
// 1 Resume, 2 Checksum.
func putResume(b []byte, h Hello) {
	binary.LittleEndian.PutUint64(b[0:], h.Link)
	var flags uint32
	if h.Resume {
		flags |= 1
	}
	if h.Checksum {
		flags |= 2
	}
	binary.LittleEndian.PutUint32(b[8:], flags)
	binary.LittleEndian.PutUint64(b[12:], h.Count)
	binary.LittleEndian.PutUint64(b[20:], h.Gen)
}

// getResume reads what putResume wrote into h.
func getResume(b []byte, h *Hello) error {
	h.Link = binary.LittleEndian.Uint64(b[0:])
	flags := binary.LittleEndian.Uint32(b[8:])
	if flags > 3 || (flags != 0 && h.Link == 0) {
		return fmt.Errorf("handshake: bad session flags %#x for link %#x", flags, h.Link)
	}
	h.Resume, h.Checksum = flags&1 != 0, flags&2 != 0
	h.Count = binary.LittleEndian.Uint64(b[12:])
	h.Gen = binary.LittleEndian.Uint64(b[20:])
	return nil
}

// acceptErr explains why the dialer's hello or proof did not arrive.
func acceptErr(what string, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("handshake: no %s before the deadline (a silent or slow client, or a half-open connection): %w: %w", what, ErrHalfOpen, err)
	}
	return fmt.Errorf("handshake: connection ended before its %s: %w", what, err)
}

func mac(secret []byte, role byte, n1, n2 []byte, h Hello) []byte {
	m := hmac.New(sha256.New, secret)
	var ranks [13 + 28]byte
	binary.LittleEndian.PutUint32(ranks[0:], uint32(int32(h.From)))
	binary.LittleEndian.PutUint32(ranks[4:], uint32(int32(h.To)))
	ranks[8] = h.Channel
	binary.LittleEndian.PutUint32(ranks[9:], h.Epoch)
	putResume(ranks[13:], h)
	m.Write([]byte{role})
	m.Write(n1)
	m.Write(n2)
	m.Write(ranks[:])
	return m.Sum(nil)
}
