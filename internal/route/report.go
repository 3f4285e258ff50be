package route

import (
	"bufio"
	"strings"
)

// PathsHeader is the header of the GPU check report's table of results per setup and
// path (scripts/gpu-check.sh writes it under "## Paths"): one row per setup and path
// the check ran, its result "passed" or "failed", e.g. "| shared-gpu | staged | passed |".
const PathsHeader = "| setup | path | result |"

// PathResults reads a report's paths table: the result of each setup and path, keyed
// by "setup path" (names as Setup.String and Route.String spell them). A report
// without the table gives none.
func PathResults(report string) map[string]string {
	out := map[string]string{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(report))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == PathsHeader {
			in = true
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		out[strings.TrimSpace(cells[0])+" "+strings.TrimSpace(cells[1])] = strings.TrimSpace(cells[2])
	}
	return out
}

// StepResult is a step's result in a report's step table ("| step | result | seconds |
// why |"): "pass", "fail", "skip", or "" if the report has no such step.
func StepResult(report, step string) string {
	for _, line := range strings.Split(report, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) >= 2 && strings.TrimSpace(cells[0]) == step {
			return strings.TrimSpace(cells[1])
		}
	}
	return ""
}
