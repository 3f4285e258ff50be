package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTable(t *testing.T) {
	want := "| `GONCCL_CFGTEST_NAME` | `anon` | a name |\n" +
		"| `GONCCL_CFGTEST_ON` | `0` | a switch |\n" +
		"| `GONCCL_CFGTEST_N` | (auto) | a count |\n" +
		"| `GONCCL_CFGTEST_ELSEWHERE` | `x` | read elsewhere |\n" +
		"| `GONCCL_CFGTEST_LEVEL` | `warn` | a level |\n" +
		"| `GONCCL_CFGTEST_SIZE` | `8M` | a size, checked only |\n" +
		"| `GONCCL_CFGTEST_CUSTOM` | `ok` | custom |\n"
	require.Equal(t, want, Table(testParams))
}

func TestSpliceTable(t *testing.T) {
	doc := "# Title\n\n| Variable | Default | Meaning |\n|---|---|---|\n" +
		"| `GONCCL_A` | `1` | a |\n| `GONCCL_B` | `2` | b |\n\nAfter.\n"
	old, updated, found := SpliceTable(doc, "GONCCL_", "| `GONCCL_C` | `3` | c |\n")
	require.True(t, found)
	require.Equal(t, "| `GONCCL_A` | `1` | a |\n| `GONCCL_B` | `2` | b |\n", old)
	require.Equal(t, "# Title\n\n| Variable | Default | Meaning |\n|---|---|---|\n| `GONCCL_C` | `3` | c |\n\nAfter.\n", updated)

	// The same rows give the same document back.
	_, same, _ := SpliceTable(doc, "GONCCL_", old)
	require.Equal(t, doc, same)

	_, _, found = SpliceTable("# No table\n", "GONCCL_", "rows")
	require.False(t, found)
}
