// Package testcert makes certificate authorities and certificates for tests of
// GONCCL_TLS: PEM files in a directory, made with Go's crypto in milliseconds. It is
// for tests only; nothing in the library imports it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// CA is a certificate authority that signs Leaf certificates.
type CA struct {
	Cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	dir     string
	CertPEM string // path of its certificate, for GONCCL_TLS_CA
}

// Files are the PEM files of one certificate: GONCCL_TLS_CERT and GONCCL_TLS_KEY.
type Files struct{ Cert, Key string }

// NewCA makes a CA named name and writes its certificate to dir/name-ca.pem.
func NewCA(dir, name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name + " CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &CA{Cert: cert, key: key, dir: dir, CertPEM: filepath.Join(dir, name+"-ca.pem")}
	return ca, writePEM(ca.CertPEM, "CERTIFICATE", der)
}

// Leaf makes a certificate for name signed by the CA, valid from notBefore to
// notAfter, and writes dir/name.pem and dir/name-key.pem.
func (ca *CA) Leaf(name string, notBefore, notAfter time.Time) (Files, error) {
	return leaf(ca.dir, name, notBefore, notAfter, ca.Cert, ca.key)
}

// SelfSigned makes a certificate for name that signs itself (a stranger's), valid
// for a day, in dir.
func SelfSigned(dir, name string) (Files, error) {
	return leaf(dir, name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour), nil, nil)
}

func leaf(dir, name string, notBefore, notAfter time.Time, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (Files, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return Files{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return Files{}, err
	}
	f := Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	if err := writePEM(f.Cert, "CERTIFICATE", der); err != nil {
		return Files{}, err
	}
	return f, writePEM(f.Key, "EC PRIVATE KEY", kder)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return n
}

func writePEM(path, kind string, der []byte) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		return fmt.Errorf("testcert: %w", err)
	}
	return nil
}
