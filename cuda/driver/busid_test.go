package driver

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNormalizeBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:07:00.0":   "0000:07:00.0",
		"0000:B7:00.0":       "0000:b7:00.0",
		"00000001:3:1.2\x00": "0001:03:01.2",
		"garbage":            "garbage",
	} {
		assert.Equal(t, want, NormalizeBusID(in), "%q", in)
	}
}
