package config

import (
	"slices"
	"strings"

	"github.com/gonccl/gonccl/internal/cenv"
)

// Unknown is a variable in the environment that has a registry's prefix but is none
// of its names: most likely a misspelt setting, which would otherwise be ignored.
type Unknown struct {
	Name    string
	Closest string // the known name nearest to Name, "" when none is near
}

// Hint is the unknown variable in words: "GONCCL_TIMOUT_MS is not a setting gonccl
// knows (did you mean GONCCL_TIMEOUT_MS?)".
func (u Unknown) Hint() string {
	s := u.Name + " is not a setting gonccl knows"
	if u.Closest != "" {
		s += " (did you mean " + u.Closest + "?)"
	}
	return s
}

// UnknownNames returns the variables of the environment (as the C library sees it now)
// whose names start with prefix but that known does not hold, sorted, each with the
// closest known name. A name is known when it is in known, or starts with one of
// knownPrefixes (variables that tools, not the library, read).
func UnknownNames(prefix string, known, knownPrefixes []string) []Unknown {
	return unknownOf(cenv.Names(prefix), known, knownPrefixes)
}

func unknownOf(names, known, knownPrefixes []string) []Unknown {
	var out []Unknown
	for _, n := range names {
		if slices.Contains(known, n) || slices.ContainsFunc(knownPrefixes, func(p string) bool { return strings.HasPrefix(n, p) }) {
			continue
		}
		out = append(out, Unknown{Name: n, Closest: Closest(n, known)})
	}
	slices.SortFunc(out, func(a, b Unknown) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Closest returns the name of known nearest to name in edit distance (letters
// inserted, deleted, replaced or two neighbours swapped, in any case), if it is near
// enough to be a slip: at most a third of the name's length, and at most 4. It returns
// "" when none is.
func Closest(name string, known []string) string {
	best, bestDist := "", min(4, len(name)/3)+1
	for _, k := range known {
		if d := editDistance(strings.ToUpper(name), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance between a and b: the fewest
// insertions, deletions, replacements and swaps of neighbouring letters that turn a
// into b, no letter edited twice.
func editDistance(a, b string) int {
	// rows[i][j] is the distance between a[:i] and b[:j]; three rows are enough.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
