package core

import (
	"bytes"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/gonccl/gonccl/internal/testcert"
)

// setTLS turns GONCCL_TLS on for the test with a fresh CA and one certificate it
// signs (every rank of the test shares it), and returns the CA.
func setTLS(t *testing.T) *testcert.CA {
	t.Helper()
	dir := t.TempDir()
	ca, err := testcert.NewCA(dir, "core")
	require.NoError(t, err)
	f, err := ca.Leaf("rank", time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	require.NoError(t, err)
	t.Setenv("GONCCL_TLS", "1")
	t.Setenv("GONCCL_TLS_CERT", f.Cert)
	t.Setenv("GONCCL_TLS_KEY", f.Key)
	t.Setenv("GONCCL_TLS_CA", ca.CertPEM)
	return ca
}

// Over TLS (shared memory off, so every pair talks TCP), the bootstrap, all_reduce
// over several sockets per peer and send/recv work, and each link logs its verified
// peer certificate.
func TestCommOverTLS(t *testing.T) {
	setTLS(t)
	t.Setenv("GONCCL_SHM_DISABLE", "1")
	t.Setenv("GONCCL_NSOCKS_PERTHREAD", "2")
	obs, logs := observer.New(zapcore.InfoLevel)
	t.Setenv("GONCCL_DEBUG", "INFO")
	const n = 3
	hooks := &testHooks{logTee: obs}
	id, err := newUniqueID(hooks)
	require.NoError(t, err)
	comms := make([]*Comm, n)
	initErrs := make([]error, n)
	var wg sync.WaitGroup
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], initErrs[r] = NewComm(id, n, r, Options{Timeout: 20 * time.Second, test: hooks})
		}()
	}
	wg.Wait()
	for r := range comms {
		require.NoError(t, initErrs[r], "rank %d", r)
	}
	defer destroyAll(t, comms)

	errs, outs, want := allReduceFloat32(t, comms, 300001, 5)
	for r := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		require.Equal(t, want, outs[r], "rank %d", r)
	}

	p := make([]byte, 1<<20)
	rand.New(rand.NewSource(1)).Read(p)
	got := make([]byte, len(p))
	var serr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		s, err := comms[2].Send(p, len(p), Uint8, 0, 9)
		if err == nil {
			err = wait(t, s, "send")
		}
		serr = err
	}()
	r, err := comms[0].Recv(got, len(got), Uint8, 2, 9)
	require.NoError(t, err)
	require.NoError(t, wait(t, r, "recv"))
	wg.Wait()
	require.NoError(t, serr)
	require.True(t, bytes.Equal(p, got))

	var files, peers, joins int
	for _, e := range logs.All() {
		switch {
		case strings.HasPrefix(e.Message, "TLS 1.3: certificate "):
			files++
		case strings.Contains(e.Message, "TLS 1.3 on its 3 connections, peer certificate CN=rank"):
			peers++
		case strings.Contains(e.Message, "joined over TLS, certificate CN=rank"):
			joins++
		}
	}
	require.Equal(t, n, files, "each rank logs its certificate files")
	require.Equal(t, n, joins, "the root logs each rank's certificate")
	require.GreaterOrEqual(t, peers, 2*n, "each end of each link logs its peer's certificate")
}

// Certificates that cannot be used fail init with the reason, before any connection.
func TestCommTLSBadCertificateFailsInit(t *testing.T) {
	ca := setTLS(t)
	old, err := ca.Leaf("old", time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
	require.NoError(t, err)
	t.Setenv("GONCCL_TLS_CERT", old.Cert)
	t.Setenv("GONCCL_TLS_KEY", old.Key)
	_, err = NewUniqueID()
	require.ErrorIs(t, err, ErrInvalidArgument)
	require.ErrorContains(t, err, "expired on")
}
