package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
)

// The README's performance table ("GPU speed against FlexGEMM") is what
// `bench compare -readme` prints from one run's records: a row per
// submanifold-convolution configuration that both sides measured, then
// each (mode, dtype)'s geometric mean of the ratios. TestReadmeTableFromItsRecords checks
// that the README's table is this output for the records it names.

// h200TFLOPS is the H200's measured dense bf16 tensor-core rate
// (reference/GPU.md), the denominator of Record.PctPeak on the H200 and of
// the table's "% of 790" column.
const h200TFLOPS = 790

// readmeModes and readmeDTypes order the table's rows (other values
// follow, sorted).
var (
	readmeModes  = []string{"train", "infer"}
	readmeDTypes = []string{"fp16", "bf16", "tf32"}
)

// rankIn returns v's index in order, or len(order) for a value not in it.
func rankIn(order []string, v string) int {
	if i := slices.Index(order, v); i >= 0 {
		return i
	}
	return len(order)
}

// readmePair is one configuration measured by both sides.
type readmePair struct {
	key        cfgKey
	ours, base Record
}

// readmeRatio is how the table writes a speed ratio: three decimals below
// 1.7× (the rows that a 1.5× target decides), two above.
func readmeRatio(r float64) string {
	if r < 1.7 {
		return fmt.Sprintf("%.3f×", r)
	}
	return fmt.Sprintf("%.2f×", r)
}

// optionalF formats a field that a record may lack, "–" when it does.
func optionalF(v *float64, format string) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf(format, *v)
}

// readmeLowRES is the smallest resolution of the geometric means "from
// RES 32 up" (the configurations where FlexGEMM's per-call overhead no
// longer dominates its step).
const readmeLowRES = 32

// writeReadmeTable prints the README's table of impl ours against impl
// base from recs (the last record of a configuration counts; failed
// records must have been removed), then one line per (mode, dtype): the
// geometric mean of the ratios over all its configurations and over those
// from RES readmeLowRES up, and the lowest ratio. It is an error when no
// configuration has both sides.
func writeReadmeTable(w io.Writer, recs []Record, ours, base string) error {
	sides := map[string]map[cfgKey]Record{ours: {}, base: {}}
	for _, r := range recs {
		if side, ok := sides[r.Impl]; ok && r.OpOrDefault() == opSubm {
			side[keyOf(r)] = r
		}
	}
	var pairs []readmePair
	for k, o := range sides[ours] {
		if b, ok := sides[base][k]; ok {
			pairs = append(pairs, readmePair{k, o, b})
		}
	}
	if len(pairs) == 0 {
		return fmt.Errorf("compare: no submanifold-convolution configuration has both a %q and a %q record", ours, base)
	}
	slices.SortFunc(pairs, func(a, b readmePair) int {
		return cmp.Or(cmp.Compare(rankIn(readmeModes, a.key.Mode), rankIn(readmeModes, b.key.Mode)), cmp.Compare(a.key.Mode, b.key.Mode),
			cmp.Compare(rankIn(readmeDTypes, a.key.DType), rankIn(readmeDTypes, b.key.DType)), cmp.Compare(a.key.DType, b.key.DType),
			cmp.Compare(a.key.RES, b.key.RES), cmp.Compare(a.key.C, b.key.C), cmp.Compare(a.key.L, b.key.L))
	})
	fmt.Fprintln(w, "| mode | dtype | RES, C, L | ours ms | FlexGEMM ms | speed vs FlexGEMM | ours useful TFLOP/s | % of 790 | ours / FlexGEMM peak GiB |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|")
	type group struct{ mode, dtype string }
	var groups []group
	ratios := map[group][]readmePair{}
	for _, p := range pairs {
		r := p.base.MS / p.ours.MS
		fmt.Fprintf(w, "| %s | %s | %d, %d, %d | %.2f | %.2f | %s | %.0f | %.1f %% | %s / %s |\n", p.key.Mode, p.key.DType,
			p.key.RES, p.key.C, p.key.L, p.ours.MS, p.base.MS, readmeRatio(r), p.ours.TFLOPS, 100*p.ours.TFLOPS/h200TFLOPS,
			optionalF(p.ours.PeakMemGB, "%.4f"), optionalF(p.base.PeakMemGB, "%.3f"))
		g := group{p.key.Mode, p.key.DType}
		if _, ok := ratios[g]; !ok {
			groups = append(groups, g)
		}
		ratios[g] = append(ratios[g], p)
	}
	fmt.Fprintln(w)
	for _, g := range groups {
		var all, high []float64
		low := ratios[g][0]
		for _, p := range ratios[g] {
			r := p.base.MS / p.ours.MS
			all = append(all, r)
			if p.key.RES >= readmeLowRES {
				high = append(high, r)
			}
			if r < low.base.MS/low.ours.MS {
				low = p
			}
		}
		fmt.Fprintf(w, "%s %s: geometric mean %.3f× over %d configurations", g.mode, g.dtype, geomean(all), len(all))
		if len(high) > 0 && len(high) < len(all) {
			fmt.Fprintf(w, " (%.3f× over the %d from RES %d up)", geomean(high), len(high), readmeLowRES)
		}
		fmt.Fprintf(w, "; lowest %.3f× at (%d, %d, %d)\n", low.base.MS/low.ours.MS, low.key.RES, low.key.C, low.key.L)
	}
	return nil
}

// geomean is the geometric mean of positive xs.
func geomean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += math.Log(x)
	}
	return math.Exp(s / float64(len(xs)))
}
