package tcp

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// TLS is the certificate material that turns every connection this package makes or
// accepts into TLS 1.3 with mutual certificate verification (GONCCL_TLS=1). A nil
// *TLS means plain TCP. The communicator's secret is still proven inside TLS
// (handshake.go), so a certificate alone does not join a group.
//
// Peers are verified against the CA only: any certificate the CA signs is accepted,
// whatever names it carries (ranks dial addresses, not names), and its names are
// logged. Which group a verified peer belongs to is the HMAC handshake's job.
type TLS struct {
	CertFile, KeyFile, CAFile string // as given, for logs
	cert                      tls.Certificate
	roots                     *x509.CertPool
}

// LoadTLS reads a PEM certificate, its private key and the PEM CA bundle that signs the
// group's certificates. It refuses files it cannot read, a key that is not the
// certificate's, and a certificate not valid at now (expired, or not yet valid).
func LoadTLS(certFile, keyFile, caFile string, now time.Time) (*TLS, error) {
	for _, f := range []struct{ name, path string }{
		{"GONCCL_TLS_CERT", certFile}, {"GONCCL_TLS_KEY", keyFile}, {"GONCCL_TLS_CA", caFile},
	} {
		if f.path == "" {
			return nil, fmt.Errorf("GONCCL_TLS=1 needs %s (a PEM file), but it is not set", f.name)
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s with key %s (GONCCL_TLS_CERT, GONCCL_TLS_KEY): %w", certFile, keyFile, err)
	}
	leaf := cert.Leaf
	if now.After(leaf.NotAfter) {
		return nil, fmt.Errorf("TLS certificate %s (%s) expired on %s: make a new one (GONCCL_TLS_CERT)",
			certFile, certName(leaf), leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("TLS certificate %s (%s) is not valid before %s (is this host's clock right?)",
			certFile, certName(leaf), leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("TLS CA bundle (GONCCL_TLS_CA): %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("TLS CA bundle %s (GONCCL_TLS_CA) holds no PEM certificate", caFile)
	}
	return &TLS{CertFile: certFile, KeyFile: keyFile, CAFile: caFile, cert: cert, roots: roots}, nil
}

// String describes the material for the INFO log.
func (t *TLS) String() string {
	leaf := t.cert.Leaf
	return fmt.Sprintf("TLS 1.3: certificate %s (%s, valid until %s), key %s, CA %s",
		t.CertFile, certName(leaf), leaf.NotAfter.UTC().Format(time.RFC3339), t.KeyFile, t.CAFile)
}

// SignedByCA reports whether this rank's own certificate verifies against its CA
// bundle (an error saying why not): a rank whose certificate does not would be refused
// by every peer that shares its CA.
func (t *TLS) SignedByCA() error {
	return t.verify([]*x509.Certificate{t.cert.Leaf})
}

// verify checks a peer's chain against the CA bundle, for any key usage.
func (t *TLS) verify(chain []*x509.Certificate) error {
	if len(chain) == 0 {
		return errors.New("the peer sent no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: t.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Errorf("certificate %s: %w", certName(chain[0]), err)
	}
	return nil
}

// config returns the tls.Config of one side. Both sides check the other's chain the
// same way (verifyPeer), with no host name check.
func (t *TLS) config(server bool) *tls.Config {
	c := &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{t.cert},
		InsecureSkipVerify: true, // the chain is checked in VerifyConnection, without a name
		VerifyConnection:   func(cs tls.ConnectionState) error { return t.verify(cs.PeerCertificates) },
		// Full 16 KiB records from the first byte: links carry bulk data, and
		// small frames fit one record either way.
		DynamicRecordSizingDisabled: true,
	}
	if server {
		c.ClientAuth = tls.RequireAnyClientCert
	}
	return c
}

// PeerName is the verified certificate name of the peer at the other end of c ("" for
// a plain connection), for logs.
func PeerName(c net.Conn) string {
	if cert := peerCert(c); cert != nil {
		return certName(cert)
	}
	return ""
}

// PeerFingerprint is the SHA-256 of the peer's leaf certificate on c, in hex ("" over
// plain TCP): what a reconnect must show again.
func PeerFingerprint(c net.Conn) string {
	cert := peerCert(c)
	if cert == nil {
		return ""
	}
	sum := sha256.Sum256(cert.Raw)
	return hex.EncodeToString(sum[:])
}

// peerCert is the peer's verified leaf certificate on c (a session's current
// connection, through a test's wrapper), or nil over plain TCP.
func peerCert(c net.Conn) *x509.Certificate {
	if s, ok := c.(*Session); ok {
		c = s.Conn()
	}
	if w, ok := c.(interface{ raw() net.Conn }); ok { // a test's wrapper
		c = w.raw()
	}
	var tc *tls.Conn
	switch c := c.(type) {
	case *tlsConn:
		tc = c.Conn
	case *tls.Conn:
		tc = c
	default:
		return nil
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil
	}
	return certs[0]
}

// certName is a certificate's subject and DNS names, for messages.
func certName(c *x509.Certificate) string {
	s := c.Subject.String()
	if len(c.DNSNames) > 0 {
		s += " DNS:" + strings.Join(c.DNSNames, ",")
	}
	for _, ip := range c.IPAddresses {
		s += " IP:" + ip.String()
	}
	return s
}
