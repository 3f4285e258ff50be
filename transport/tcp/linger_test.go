package tcp

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLingerEncodings(t *testing.T) {
	links := []uint64{1, 0xdeadbeef, ^uint64(0) >> 1}
	got, err := readLingerAsk(bytes.NewReader(lingerAsk(links)))
	require.NoError(t, err)
	require.Equal(t, links, got)
	for _, bad := range [][]byte{lingerAsk(nil), {0xff, 0xff, 0, 0}} {
		_, err := readLingerAsk(bytes.NewReader(bad))
		require.ErrorContains(t, err, "a linger ask for")
	}

	counts := []uint64{0, 12345, lingerGone}
	h := Hello{From: 1, Link: links[0]}
	h.nonces[3] = 7
	back, err := readLingerAnswer(bytes.NewReader(lingerAnswer(tlsSecret, h, links, counts)), tlsSecret, h, links)
	require.NoError(t, err)
	require.Equal(t, counts, back)
	refusal := append(append(refuseMagic[:], 12), "no such link"...)
	_, err = readLingerAnswer(bytes.NewReader(refusal), tlsSecret, h, links)
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	_, err = readLingerAnswer(bytes.NewReader(make([]byte, 28+macSize)), tlsSecret, h, links)
	require.ErrorContains(t, err, "bad magic")

	// A count flipped on the way, or an answer for another handshake: refused.
	forged := lingerAnswer(tlsSecret, h, links, counts)
	forged[4+8] ^= 1
	_, err = readLingerAnswer(bytes.NewReader(forged), tlsSecret, h, links)
	require.ErrorIs(t, err, errBadAnswer)
	other := h
	other.nonces[3] = 8
	_, err = readLingerAnswer(bytes.NewReader(lingerAnswer(tlsSecret, other, links, counts)), tlsSecret, h, links)
	require.ErrorIs(t, err, errBadAnswer)
}
