package cenv

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLookupSeesVariablesSetAfterStart(t *testing.T) {
	t.Setenv("GONCCL_CENV_TEST", "42") // os.Setenv calls the C setenv when cgo is linked
	v, ok := Lookup("GONCCL_CENV_TEST")
	require.True(t, ok)
	require.Equal(t, "42", v)

	_, ok = Lookup("GONCCL_CENV_TEST_UNSET_XYZ")
	require.False(t, ok)
}

func TestNamesSeesVariablesSetAfterStart(t *testing.T) {
	t.Setenv("GONCCL_CENV_TEST_NAMES", "1")
	require.Contains(t, Names("GONCCL_CENV_TEST"), "GONCCL_CENV_TEST_NAMES")
	require.NotContains(t, Names("GONCCL_CENV_TEST"), "PATH")
}
