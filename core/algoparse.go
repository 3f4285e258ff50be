package core

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// algoAllow is what GONCCL_ALGO (or Options.Algo) allows: for each collective it
// restricts, the algorithms it keeps, in the table's order.
type algoAllow map[Kind][]Algo

// String renders allow as GONCCL_ALGO would say it, collectives in alphabetical order:
// "allreduce:ring;broadcast:chain".
func (allow algoAllow) String() string {
	kinds := make([]Kind, 0, len(allow))
	for k := range allow {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b Kind) int { return cmp.Compare(collectives[a].tuneName(), collectives[b].tuneName()) })
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = collectives[k].tuneName() + ":" + joinAlgos(allow[k], ",")
	}
	return strings.Join(parts, ";")
}

func joinAlgos(algos []Algo, sep string) string {
	names := make([]string, len(algos))
	for i, a := range algos {
		names[i] = a.String()
	}
	return strings.Join(names, sep)
}

// algoHelp lists every collective:algorithm pair GONCCL_ALGO accepts.
func algoHelp() string {
	parts := make([]string, len(tunedKinds))
	for i, k := range tunedKinds {
		row := &collectives[k]
		parts[i] = row.tuneName() + ":" + joinAlgos(row.algoList(), "|")
	}
	return strings.Join(parts, ", ")
}

// algoNotes explain, in GONCCL_ALGO's help, the algorithms whose name does not.
var algoNotes = map[Algo]string{AlgoHier: "hierarchical, ranks on several hosts"}

// algoChoices lists, for GONCCL_ALGO's help (and so docs/environment.md), the algorithms of
// each collective that has a choice: "allreduce `rd`/`direct`/..., broadcast ...".
func algoChoices() string {
	var parts []string
	for _, k := range tunedKinds {
		row := &collectives[k]
		if len(row.algos) < 2 {
			continue
		}
		names := make([]string, len(row.algos))
		for i, x := range row.algos {
			names[i] = "`" + x.algo.String() + "`"
			if note := algoNotes[x.algo]; note != "" {
				names[i] += " (" + note + ")"
			}
		}
		parts = append(parts, row.tuneName()+" "+strings.Join(names, "/"))
	}
	return strings.Join(parts, ", ")
}

// parseAlgo parses GONCCL_ALGO in NCCL's syntax: entries separated by ';' (or ','),
// each "collective:algo[,algo...]" allowing those algorithms for that collective,
// "^algo" excluding one, and bare "algo[,algo...]" applying to every collective that
// has it. For example "allreduce:ring", "allreduce:ring,rd;broadcast:chain",
// "^direct", "allreduce:ring,broadcast:chain". It returns the allowed algorithms of
// each collective that the setting restricts.
func parseAlgo(s string) (algoAllow, error) {
	allow := algoAllow{}
	if strings.TrimSpace(s) == "" {
		return allow, nil
	}
	bad := func(item, why string) error {
		return fmt.Errorf("%w: GONCCL_ALGO=%q: %s (%s); expected e.g. allreduce:ring or allreduce:ring,rd;broadcast:chain, from %s",
			ErrInvalidArgument, s, item, why, algoHelp())
	}
	entries, err := algoEntries(strings.ToLower(s), bad)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := e.restrict(allow, bad); err != nil {
			return nil, err
		}
	}
	return allow, nil
}

// algoEntry is one entry of GONCCL_ALGO.
type algoEntry struct {
	kind    Kind // 0: every collective that has one of the algorithms
	exclude bool
	algos   []string // as written: a name may be no algorithm at all
}

// algoEntries groups the tokens of s into entries: a token "coll:algo" starts an
// entry, bare tokens join the current one (or a global entry when none has started
// since the last ';').
func algoEntries(s string, bad func(item, why string) error) ([]*algoEntry, error) {
	var entries []*algoEntry
	for _, part := range strings.Split(s, ";") {
		var cur *algoEntry
		for _, tok := range strings.Split(part, ",") {
			tok = strings.TrimSpace(tok)
			if tok == "" {
				continue
			}
			if coll, algo, ok := strings.Cut(tok, ":"); ok {
				k, known := tunedKind(coll)
				if !known {
					return nil, bad(tok, "unknown collective "+coll)
				}
				cur = &algoEntry{kind: k}
				entries = append(entries, cur)
				tok = algo
			} else if cur == nil {
				cur = &algoEntry{}
				entries = append(entries, cur)
			}
			if strings.HasPrefix(tok, "^") {
				if len(cur.algos) > 0 {
					return nil, bad(tok, "^ must come first in an entry")
				}
				cur.exclude = true
				tok = tok[1:]
			}
			cur.algos = append(cur.algos, tok)
		}
	}
	return entries, nil
}

// restrict narrows allow by e: for each collective e applies to, it keeps the
// algorithms e names (or, excluding, those it does not name).
func (e *algoEntry) restrict(allow algoAllow, bad func(item, why string) error) error {
	kinds := tunedKinds[:]
	if e.kind != 0 {
		kinds = []Kind{e.kind}
	}
	matched := false
	for _, k := range kinds {
		row := &collectives[k]
		var keep []Algo
		for _, x := range row.algos {
			if slices.Contains(e.algos, x.algo.String()) != e.exclude {
				keep = append(keep, x.algo)
			}
		}
		for _, name := range e.algos {
			if slices.ContainsFunc(row.algos, func(x algorithm) bool { return x.algo.String() == name }) {
				matched = true
			} else if e.kind != 0 {
				return bad(row.tuneName()+":"+name, fmt.Sprintf("%s has no algorithm %q", row.tuneName(), name))
			}
		}
		// A bare entry restricts only the collectives it names an algorithm of, and
		// never takes a collective's last algorithm away.
		if e.kind == 0 && (len(keep) == 0 || len(keep) == len(row.algos)) {
			continue
		}
		if len(keep) == 0 {
			return bad(row.tuneName(), "that excludes every algorithm of "+row.tuneName())
		}
		allow[k] = keep
	}
	if !matched {
		return bad(strings.Join(e.algos, ","), "no collective has that algorithm")
	}
	return nil
}
