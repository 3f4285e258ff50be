package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The time estimator's calibration. The cost model's built-in rates (tuning.go) only
// need to be right in their ratios to choose algorithms; an estimate has to be right
// in absolute terms, on this host, including what the caller's own measurement
// includes (torch's dispatch, the Work, the wake-ups). So `python -m gonccl.bench
// --calibrate` times the real collectives over a size sweep and writes them, per
// (host, ranks, transport), to a small JSON file (GONCCL_CALIBRATION); at the first
// estimate the communicator reads the entry that matches it and fits the model's
// rates to it: one link latency and bandwidth, one reduction speed, one speed of
// taking in and handing back the caller's tensors, and one fixed cost per operation
// kind. Estimates then price the algorithm the selector chooses
// (GONCCL_ALGO=auto or the user's restriction, unchanged: every rank must choose alike,
// and calibration files differ per host) with the fitted rates. A missing, garbled or
// non-matching file leaves the built-in rates in place and says so in the log.

// calibrationFormat names the file's layout; a file of another format is refused.
const calibrationFormat = "gonccl-calibration/1"

// DefaultCalibrationPath is where GONCCL_CALIBRATION points when unset:
// ~/.cache/gonccl/calibration.json ("" when there is no home directory).
func DefaultCalibrationPath() string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "gonccl", "calibration.json")
}

// calibFile is the file: entries for any number of (host, ranks, transport).
type calibFile struct {
	Format  string       `json:"format"`
	Entries []calibEntry `json:"entries"`
}

// calibEntry is one calibration run: the measured time of each operation and size on
// Host with NRanks ranks over Transport ("shm" or "tcp").
type calibEntry struct {
	Host      string       `json:"host"`
	NRanks    int          `json:"nranks"`
	Transport string       `json:"transport"`
	Measured  string       `json:"measured,omitempty"` // when (free text, for the logs)
	Points    []calibPoint `json:"points"`
}

// calibPoint is one measurement: an operation (torch's name) on a message of Bytes
// (the size Estimate takes) took US microseconds from issue to completion.
type calibPoint struct {
	Op    string  `json:"op"`
	Bytes int     `json:"bytes"`
	US    float64 `json:"us"`
}

// calibOps maps the operation names a calibration file may use to kinds.
var calibOps = map[string]Kind{
	"all_reduce": KindAllReduce, "all_gather": KindAllGather, "reduce_scatter": KindReduceScatter,
	"broadcast": KindBroadcast, "reduce": KindReduce,
}

// calibKey is what an entry must match: this communicator's host, size and transport.
type calibKey struct {
	host      string
	nranks    int
	transport string
}

func (k calibKey) String() string {
	return fmt.Sprintf("host %s, %d ranks, %s", k.host, k.nranks, k.transport)
}

// Why a calibration file could not be used. errCalibMissing and errCalibNoEntry are
// ordinary (nobody calibrated this host, or not for this many ranks); errCalibGarbled
// means someone wrote a file that is wrong.
var (
	errCalibMissing = errors.New("no calibration file")
	errCalibNoEntry = errors.New("no calibration entry")
	errCalibGarbled = errors.New("calibration file unusable")
)

// readCalibration returns the last entry of the file at path that matches key, with its
// points checked.
func readCalibration(path string, key calibKey) (*calibEntry, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s", errCalibMissing, path)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errCalibGarbled, path, err)
	}
	var f calibFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %s is not JSON of the calibration format: %v", errCalibGarbled, path, err)
	}
	if f.Format != calibrationFormat {
		return nil, fmt.Errorf("%w: %s has format %q, not %q", errCalibGarbled, path, f.Format, calibrationFormat)
	}
	var found *calibEntry
	var have []string
	for i := range f.Entries {
		e := &f.Entries[i]
		k := calibKey{e.Host, e.NRanks, e.Transport}
		if k == key {
			found = e
		} else {
			have = append(have, k.String())
		}
	}
	if found == nil {
		if len(have) == 0 {
			have = []string{"no entries"}
		}
		return nil, fmt.Errorf("%w in %s for %s (it has: %s)", errCalibNoEntry, path, key, strings.Join(have, "; "))
	}
	if err := found.check(); err != nil {
		return nil, fmt.Errorf("%w: %s, entry for %s: %v", errCalibGarbled, path, key, err)
	}
	return found, nil
}

// check says what is wrong with e's points (nil: nothing).
func (e *calibEntry) check() error {
	kinds := map[Kind]int{}
	for i, p := range e.Points {
		k, ok := calibOps[p.Op]
		if !ok {
			return fmt.Errorf("point %d: unknown operation %q", i, p.Op)
		}
		if p.Bytes < 0 || p.Bytes > 1<<40 || !(p.US > 0) || math.IsInf(p.US, 0) {
			return fmt.Errorf("point %d (%s): %d bytes in %v us is not a measurement", i, p.Op, p.Bytes, p.US)
		}
		kinds[k]++
	}
	for k, n := range kinds {
		if n < 2 {
			return fmt.Errorf("%s has %d point; a fit needs two sizes at least", k, n)
		}
	}
	if len(kinds) == 0 {
		return errors.New("no points")
	}
	return nil
}

// calibration is a fitted set of rates (see fitCalibration).
type calibration struct {
	from       string // where it came from, for the logs
	link       linkCost
	reduceGBs  float64
	copyGBs    float64          // the caller's tensors into and out of the operation (callerBytes)
	overheadUS map[Kind]float64 // the fixed cost of one call, per measured kind
	otherUS    float64          // the fixed cost of kinds not measured: the mean
	worst      float64          // the fit's worst ratio (either way) over its points
}

// overhead is the fixed cost of one call of kind k.
func (c *calibration) overhead(k Kind) float64 {
	if us, ok := c.overheadUS[k]; ok {
		return us
	}
	return c.otherUS
}

// rated is base with the calibration's rates.
func (c *calibration) rated(base model) model {
	m := base
	m.link = linkCost{name: base.link.name, latencyUS: c.link.latencyUS, bwGBs: c.link.bwGBs}
	m.reduceGBs = c.reduceGBs
	return m
}

// price is the calibrated time of algorithm a of row k on bytes.
func (c *calibration) price(base model, rows []collective, k Kind, a Algo, bytes int) float64 {
	m := c.rated(base)
	return c.overhead(k) + callerBytes(k, base.n, bytes)/(c.copyGBs*1e3) + rows[k].estimate(&m, a, bytes).us
}

// callerBytes is how many bytes of the caller's tensors an operation of kind k on a
// message of bytes over n ranks reads and writes outside its algorithm's steps: its
// input taken in and its output handed back (the algorithms' own tables price the
// messages; the copy of the whole input and output is the same for every algorithm).
// all_gather hands back n blocks, reduce_scatter takes in n.
func callerBytes(k Kind, n, bytes int) float64 {
	b := float64(bytes)
	switch k {
	case KindAllGather, KindReduceScatter:
		return b * float64(n+1)
	case KindAllReduce, KindBroadcast, KindReduce, KindSendRecv:
		return 2 * b
	}
	return 0
}

func (c *calibration) String() string {
	kinds := make([]Kind, 0, len(c.overheadUS))
	for k := range c.overheadUS {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	var ovh []string
	for _, k := range kinds {
		ovh = append(ovh, fmt.Sprintf("%s %.1f us", k, c.overheadUS[k]))
	}
	return fmt.Sprintf("%s; fitted: link latency %.2f us, bandwidth %.3f GB/s, reduction %.3f GB/s, caller's tensors %.3f GB/s, per call %s; worst fit %.2fx",
		c.from, c.link.latencyUS, c.link.bwGBs, c.reduceGBs, c.copyGBs, strings.Join(ovh, ", "), c.worst)
}

// calibrationKey is what this communicator's calibration entry must match.
func (c *Comm) calibrationKey() calibKey {
	return calibKey{host: hostname(), nranks: c.nranks, transport: c.sel.m.link.name}
}

// calibrated returns the communicator's calibration, read and fitted at the first call
// (nil: none, the built-in rates). It logs which, once.
func (c *Comm) calibrated() *calibration {
	c.calOnce.Do(func() {
		path := c.cfg.calibration
		if path == "" {
			c.logs.tune.Info("time estimates use the built-in rates: GONCCL_CALIBRATION=none")
			return
		}
		key := c.calibrationKey()
		e, err := readCalibration(path, key)
		switch {
		case errors.Is(err, errCalibMissing):
			c.logs.tune.Info(fmt.Sprintf("time estimates use the built-in rates: %v (`python -m gonccl.bench --calibrate -np %d` writes one)", err, c.nranks))
			return
		case errors.Is(err, errCalibNoEntry):
			c.logs.tune.Info(fmt.Sprintf("time estimates use the built-in rates: %v", err))
			return
		case err != nil:
			c.logs.tune.Warn(fmt.Sprintf("time estimates use the built-in rates: %v (rewrite it with `python -m gonccl.bench --calibrate -np %d`)", err, c.nranks))
			return
		}
		cal := fitCalibration(c.sel.m, c.sel.rows, c.sel.priced(e.Points))
		if cal == nil {
			c.logs.tune.Warn(fmt.Sprintf("time estimates use the built-in rates: %s, entry for %s: GONCCL_ALGO allows no algorithm for any of its points", path, key))
			return
		}
		cal.from = fmt.Sprintf("%s (%s, measured %s, %d points)", path, key, e.Measured, len(e.Points))
		c.cal = cal
		c.logs.tune.Info("time estimates use calibration " + cal.String())
	})
	return c.cal
}

// priced pairs each point with the algorithm the selector chooses for it (points it
// can choose none for are dropped: nothing this communicator runs is priced by them).
func (s *selector) priced(pts []calibPoint) []pricedPoint {
	out := make([]pricedPoint, 0, len(pts))
	for _, p := range pts {
		k := calibOps[p.Op]
		best, ests := s.evaluate(k, p.Bytes)
		if best < 0 {
			continue
		}
		out = append(out, pricedPoint{kind: k, algo: ests[best].algo, bytes: p.Bytes, us: p.US})
	}
	return out
}
