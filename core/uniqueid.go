package core

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"time"
)

// UniqueIDSize is the size of a UniqueID, the same as NCCL's.
const UniqueIDSize = 128

// UniqueID identifies one communicator being created: the bootstrap root's address and
// a random secret. One rank makes it with NewUniqueID and shares it out of band (a file,
// a c10d Store); every rank passes it to NewComm. Anyone holding it can join, so treat
// it like a password.
//
// Layout: "GNID" | version u8 | ip len u8 | port u16 | ip [16] | secret [16] | zeros.
type UniqueID [UniqueIDSize]byte

const (
	uidMagic   = "GNID"
	uidVersion = 1
)

// NewUniqueID creates a UniqueID and starts this process's bootstrap root for it: a
// listener, on the interface GONCCL_SOCKET_IFNAME selects, that gathers the ranks'
// addresses once and then closes.
func NewUniqueID() (UniqueID, error) { return newUniqueID(nil) }

// newUniqueID is NewUniqueID with tests' hooks for the root (nil: none).
func newUniqueID(hooks *testHooks) (UniqueID, error) {
	var id UniqueID
	cfg, err := loadConfig()
	if err != nil {
		return id, err
	}
	hooks.apply(cfg)
	ifc, err := selectInterface(cfg.socketIfname)
	if err != nil {
		return id, err
	}
	l, err := listen(ifc, cfg.portRange)
	if err != nil {
		return id, err
	}
	addr := l.Addr().(*net.TCPAddr)
	copy(id[0:4], uidMagic)
	id[4] = uidVersion
	ip := addr.IP.To4()
	if ip == nil {
		ip = addr.IP.To16()
	}
	id[5] = byte(len(ip))
	binary.BigEndian.PutUint16(id[6:8], uint16(addr.Port))
	copy(id[8:24], ip)
	if _, err := rand.Read(id[24:40]); err != nil {
		l.Close()
		return id, err
	}
	logs := newLoggers(cfg, hostname(), -1)
	g := cfg.guard(logs.init)
	g.Go("bootstrap root", nil, func(error) { l.Close() }, func() { serveRoot(l, id.secret(), cfg.tls, time.Now().Add(cfg.timeout), cfg.test.handshake(), logs, g) })
	return id, nil
}

func (id *UniqueID) secret() []byte { return id[24:40] }

// rootAddr returns the bootstrap root's host:port, or an error if id is not a UniqueID.
func (id *UniqueID) rootAddr() (string, error) {
	if string(id[0:4]) != uidMagic || id[4] != uidVersion {
		return "", errors.New("not a gonccl unique id (was it made by goncclGetUniqueId and copied whole?)")
	}
	n := int(id[5])
	if n != 4 && n != 16 {
		return "", fmt.Errorf("corrupt unique id: address length %d", n)
	}
	ip := net.IP(append([]byte(nil), id[8:8+n]...))
	port := binary.BigEndian.Uint16(id[6:8])
	return net.JoinHostPort(ip.String(), fmt.Sprint(port)), nil
}
