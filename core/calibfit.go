package core

import (
	"math"
	"sort"
)

// Fitting the cost model's rates to measured times (see calibration.go). The
// parameters are the link's latency and bandwidth, the reduction speed, the speed of
// copying the caller's tensors in and out, and one fixed cost per operation kind
// measured; the fit minimises the sum of squared log ratios
// between the model's price of each point (the algorithm the selector chooses for it,
// priced with the parameters) and its measured time, so a 10 us message weighs as
// much as a 10 ms one. The model is not linear in its parameters everywhere (a
// pipeline's stage is the slower of sending and reducing), so the search is
// Nelder-Mead's simplex over the parameters' logarithms: deterministic, a few
// thousand evaluations of a few dozen points, well under a millisecond's work per
// hundred points.

// pricedPoint is a measurement with the algorithm that ran it.
type pricedPoint struct {
	kind  Kind
	algo  Algo
	bytes int
	us    float64
}

// Bounds of the fitted parameters, so that a degenerate file cannot drive the search
// to zero or infinity.
const (
	fitMinUS, fitMaxUS   = 0.01, 1e7
	fitMinGBs, fitMaxGBs = 1e-3, 1e4
)

// fitCalibration fits the rates to pts for communicators like base (nil if pts is
// empty).
func fitCalibration(base model, rows []collective, pts []pricedPoint) *calibration {
	if len(pts) == 0 {
		return nil
	}
	var kinds []Kind
	least := map[Kind]float64{}
	for _, p := range pts {
		if _, ok := least[p.kind]; !ok {
			kinds = append(kinds, p.kind)
			least[p.kind] = p.us
		}
		least[p.kind] = math.Min(least[p.kind], p.us)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	decode := func(x []float64) *calibration {
		c := &calibration{
			link:       linkCost{latencyUS: clampExp(x[0], fitMinUS, fitMaxUS), bwGBs: clampExp(x[1], fitMinGBs, fitMaxGBs)},
			reduceGBs:  clampExp(x[2], fitMinGBs, fitMaxGBs),
			copyGBs:    clampExp(x[3], fitMinGBs, fitMaxGBs),
			overheadUS: make(map[Kind]float64, len(kinds)),
		}
		for i, k := range kinds {
			c.overheadUS[k] = clampExp(x[4+i], fitMinUS, fitMaxUS)
			c.otherUS += c.overheadUS[k] / float64(len(kinds))
		}
		return c
	}
	loss := func(x []float64) float64 {
		c := decode(x)
		sum := 0.0
		for _, p := range pts {
			d := math.Log(c.price(base, rows, p.kind, p.algo, p.bytes) / p.us)
			sum += d * d
		}
		return sum
	}
	x := []float64{math.Log(base.link.latencyUS), math.Log(base.link.bwGBs), math.Log(base.reduceGBs), math.Log(memcpyGBs)}
	for _, k := range kinds {
		x = append(x, math.Log(least[k]*0.9))
	}
	for range 3 { // restarts: a fresh simplex around the best point escapes a collapsed one
		x = nelderMead(loss, x, 1.0, 1500)
	}
	c := decode(x)
	for _, p := range pts {
		r := c.price(base, rows, p.kind, p.algo, p.bytes) / p.us
		c.worst = math.Max(c.worst, math.Max(r, 1/r))
	}
	return c
}

// clampExp is e^x, kept within [lo, hi].
func clampExp(x, lo, hi float64) float64 {
	return math.Min(hi, math.Max(lo, math.Exp(x)))
}

// nelderMead minimises f from x0 with an initial simplex of the given step along each
// axis, for at most iters iterations (reflection 1, expansion 2, contraction and
// shrink 1/2), and returns the best point found.
func nelderMead(f func([]float64) float64, x0 []float64, step float64, iters int) []float64 {
	n := len(x0)
	pts := make([][]float64, n+1)
	vals := make([]float64, n+1)
	for i := range pts {
		pts[i] = append([]float64(nil), x0...)
		if i > 0 {
			pts[i][i-1] += step
		}
		vals[i] = f(pts[i])
	}
	order := make([]int, n+1)
	point := func(from []float64, towards []float64, t float64) []float64 {
		p := make([]float64, n)
		for j := range p {
			p[j] = from[j] + t*(towards[j]-from[j])
		}
		return p
	}
	for range iters {
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return vals[order[a]] < vals[order[b]] })
		best, worst, second := order[0], order[n], order[n-1]
		if vals[worst]-vals[best] < 1e-12*(1+math.Abs(vals[best])) {
			break
		}
		centroid := make([]float64, n)
		for _, i := range order[:n] {
			for j := range centroid {
				centroid[j] += pts[i][j] / float64(n)
			}
		}
		refl := point(centroid, pts[worst], -1)
		fr := f(refl)
		switch {
		case fr < vals[best]:
			exp := point(centroid, pts[worst], -2)
			if fe := f(exp); fe < fr {
				pts[worst], vals[worst] = exp, fe
			} else {
				pts[worst], vals[worst] = refl, fr
			}
		case fr < vals[second]:
			pts[worst], vals[worst] = refl, fr
		default:
			con := point(centroid, pts[worst], 0.5)
			if fc := f(con); fc < vals[worst] {
				pts[worst], vals[worst] = con, fc
				continue
			}
			for _, i := range order[1:] {
				pts[i] = point(pts[best], pts[i], 0.5)
				vals[i] = f(pts[i])
			}
		}
	}
	best := 0
	for i := range vals {
		if vals[i] < vals[best] {
			best = i
		}
	}
	return pts[best]
}
