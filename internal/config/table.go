package config

import (
	"fmt"
	"strings"
)

// Table renders params as the rows of a Markdown table, one per parameter: its name,
// its default (or, with none, what Unset says), and its help.
func Table[C any](params []Param[C]) string {
	var b strings.Builder
	for _, p := range params {
		def := "`" + p.Default + "`"
		if p.Default == "" {
			def = p.Unset
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", p.Name, def, p.Help)
	}
	return b.String()
}

// SpliceTable finds doc's table of variables named prefix...: the lines from the first
// to the last that start with "| `"+prefix. It returns those lines (old), doc with
// them replaced by rows (updated), and whether there were any (if not, old and
// updated are empty). A test compares old with Table's rows, and writes updated back
// when asked to regenerate the document.
func SpliceTable(doc, prefix, rows string) (old, updated string, found bool) {
	lines := strings.SplitAfter(doc, "\n")
	first, last := -1, -1
	for i, line := range lines {
		if strings.HasPrefix(line, "| `"+prefix) {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return "", "", false
	}
	old = strings.Join(lines[first:last+1], "")
	updated = strings.Join(lines[:first], "") + rows + strings.Join(lines[last+1:], "")
	return old, updated, true
}
