package core

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Every row of the table is whole, GONCCL_ALGO names each collective that has
// algorithms exactly once, and every algorithm has a name that parses back to it.
func TestCollectiveTable(t *testing.T) {
	tuned := map[Kind]bool{}
	for _, k := range tunedKinds {
		require.False(t, tuned[k], "%s is twice in tunedKinds", k)
		tuned[k] = true
	}
	names := map[string]Kind{}
	for k := range collectives {
		row := Kind(k).row()
		if row == nil {
			continue
		}
		require.NotEmpty(t, row.label, "kind %d", k)
		require.NotNil(t, row.run, "%s has no run function", row.label)
		require.Equal(t, len(row.algos) > 0, tuned[Kind(k)], "%s: in tunedKinds if and only if it has algorithms", row.label)
		name := row.tuneName()
		require.NotContains(t, names, name, "%s and %s share the name %q", Kind(k), names[name], name)
		names[name] = Kind(k)
		for _, x := range row.algos {
			require.NotEqual(t, AlgoNone, x.algo, row.label)
			require.NotNil(t, x.cost, "%s:%s has no cost", name, x.algo)
			allow, err := parseAlgo(name + ":" + x.algo.String())
			require.NoError(t, err)
			require.Equal(t, algoAllow{Kind(k): {x.algo}}, allow)
		}
	}
	for k := KindAllReduce; k <= KindAlltoAllv; k++ {
		require.NotNil(t, k.row(), "kind %d has no row", k)
	}
}
