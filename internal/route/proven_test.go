package route

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkProof returns why report p (under root) does not show route r passing on setup
// s, or nil if it does.
func checkProof(root string, s Setup, r Route, p *Proof) error {
	text, err := os.ReadFile(filepath.Join(root, p.Report))
	if err != nil {
		return fmt.Errorf("%s %s cites a report that cannot be read: %w", s, r, err)
	}
	rep := string(text)
	if first, _, _ := strings.Cut(rep, "\n"); strings.Contains(first, "dry run") {
		return fmt.Errorf("%s %s: %s is a dry run, which ran no GPU", s, r, p.Report)
	}
	for _, want := range []struct{ what, text string }{
		{"date", "- date: " + p.Date}, {"GPU", p.GPU}, {"driver", p.Driver}, {"torch", "- torch: " + p.Torch},
	} {
		if want.text == "" || !strings.Contains(rep, want.text) {
			return fmt.Errorf("%s %s: %s does not say %s %q", s, r, p.Report, want.what, want.text)
		}
	}
	readme, _ := os.ReadFile(filepath.Join(root, filepath.Dir(p.Report), "README.md"))
	if len(p.Commit) < 7 || !strings.Contains(rep+string(readme), p.Commit) {
		return fmt.Errorf("%s %s: neither %s nor the README beside it names source %q", s, r, p.Report, p.Commit)
	}
	if len(p.Steps) == 0 {
		if got := PathResults(rep)[s.String()+" "+r.String()]; got != "passed" {
			return fmt.Errorf("%s %s: the paths table of %s says %q, not passed", s, r, p.Report, got)
		}
	}
	for _, step := range p.Steps {
		if got := StepResult(rep, step); got != "pass" {
			return fmt.Errorf("%s %s: step %s of %s: %q, not pass", s, r, step, p.Report, got)
		}
	}
	for _, line := range p.Shows {
		if !strings.Contains(rep, line) {
			return fmt.Errorf("%s %s: %s does not hold %q", s, r, p.Report, line)
		}
	}
	return nil
}

// TestProvenCellsCiteReports: every proven cell's report exists under bench/results/
// and shows that path passing on that setup.
func TestProvenCellsCiteReports(t *testing.T) {
	n := 0
	for s := range NumSetups {
		for r := range NumRoutes {
			p := Proven[s][r]
			if p == nil {
				continue
			}
			n++
			require.True(t, strings.HasPrefix(p.Report, "bench/results/"), "%s %s: %s", s, r, p.Report)
			require.NoError(t, checkProof("../..", s, r, p))
		}
	}
	require.NotZero(t, n)
}

// TestProofCheckFails: the check refuses a report that is missing, one whose step
// failed, one that names another GPU, and a paths table that says failed.
func TestProofCheckFails(t *testing.T) {
	root := t.TempDir()
	report := "- date: 2026-12-01 10:00:00 UTC\n- source: abc1234\n- torch: 2.11.0+cu130\n  - 0, NVIDIA H200, 580.1, 1 MiB\n\n" +
		"| step | result | seconds | why |\n|---|---|---|---|\n| capi-cuda-2ranks | fail | 2 | exit 1 |\n\n## Paths\n" +
		PathsHeader + "\n|---|---|---|\n| shared-gpu | device | failed |\n| shared-gpu | staged | passed |\n"
	require.NoError(t, os.MkdirAll(filepath.Join(root, "r"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "r", "report.md"), []byte(report), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "r", "dry.md"), []byte("# gonccl GPU check (dry run: no GPU used)\n"+report), 0o644))
	good := Proof{Report: "r/report.md", Date: "2026-12-01", GPU: "NVIDIA H200", Driver: "580.1", Torch: "2.11.0+cu130", Commit: "abc1234"}
	require.NoError(t, checkProof(root, SharedGPU, RouteStaged, &good))
	for name, c := range map[string]struct {
		r   Route
		mod func(*Proof)
	}{
		"missing":      {RouteStaged, func(p *Proof) { p.Report = "r/none.md" }},
		"failed step":  {RouteStaged, func(p *Proof) { p.Steps = []string{"capi-cuda-2ranks"} }},
		"absent step":  {RouteStaged, func(p *Proof) { p.Steps = []string{"ddp"} }},
		"other GPU":    {RouteStaged, func(p *Proof) { p.GPU = "NVIDIA H100" }},
		"other source": {RouteStaged, func(p *Proof) { p.Commit = "fff0000" }},
		"path failed":  {RouteDevice, func(*Proof) {}},
		"path absent":  {RouteSameGPU, func(*Proof) {}},
		"no INIT line": {RouteStaged, func(p *Proof) { p.Shows = []string{"staged path"} }},
		"dry run":      {RouteStaged, func(p *Proof) { p.Report = "r/dry.md" }},
	} {
		p := good
		c.mod(&p)
		require.Error(t, checkProof(root, SharedGPU, c.r, &p), name)
	}
}

// TestAutoTakesOnlyProvenRoutes: where nothing but staging is proven (today every
// setup), the routes auto may take are the staged one, and every other route is one
// to ask for by name.
func TestAutoTakesOnlyProvenRoutes(t *testing.T) {
	for s := range NumSetups {
		for _, r := range []Route{RoutePipelined, RouteDevice, RouteSameGPU} {
			if !IsProven(s, r) {
				require.Contains(t, Verdict(s, RouteStaged), r.String()+": "+r.OptIn(), s)
			}
		}
	}
	require.Contains(t, Verdict(SharedGPU, RouteStaged), "staged path for ranks sharing a GPU without MPS, proven on hardware (GPU check 2026-11-26 on NVIDIA H100 80GB HBM3")
	require.Contains(t, Verdict(GPUPerRank, RouteStaged), "not yet proven")
}

// TestPathResults reads the paths table and nothing past it.
func TestPathResults(t *testing.T) {
	rep := "x\n" + PathsHeader + "\n|---|---|---|\n| one-rank | staged | passed |\n| shared-gpu | same-GPU | failed |\n\n| a | b | c |\n"
	require.Equal(t, map[string]string{"one-rank staged": "passed", "shared-gpu same-GPU": "failed"}, PathResults(rep))
}
