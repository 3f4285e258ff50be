package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHeaderCarriesEpoch(t *testing.T) {
	h := Header{Seq: 1, Kind: 2, Root: -1, Epoch: 0xdeadbeef}
	b := make([]byte, HeaderSize)
	EncodeHeader(b, &h, 0)
	got, err := DecodeHeader(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
}
