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
	back, err := readLingerAnswer(bytes.NewReader(lingerAnswer(counts)), len(counts))
	require.NoError(t, err)
	require.Equal(t, counts, back)
	refusal := append(append(refuseMagic[:], 12), "no such link"...)
	_, err = readLingerAnswer(bytes.NewReader(refusal), 3)
	var refused *RefusedError
	require.ErrorAs(t, err, &refused)
	_, err = readLingerAnswer(bytes.NewReader(make([]byte, 28)), 3)
	require.ErrorContains(t, err, "bad magic")
}
