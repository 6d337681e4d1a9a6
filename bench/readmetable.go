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

// writeReadmeTable prints the README's table of impl ours's rows of
// compareRecords (subm_conv only; the baseline's impl is compareRecords'),
// then one line per (mode, dtype): the geometric mean of the ratios over
// all its configurations and over those from RES readmeLowRES up, and the
// lowest ratio. It is an error when ours has no such row, or two for one
// configuration (two algorithms: which would the table show?).
func writeReadmeTable(w io.Writer, rows []ratioRow, ours string) error {
	var mine []ratioRow
	for _, r := range rows {
		if r.Impl != ours || r.Key.Op != opSubm {
			continue
		}
		if len(mine) > 0 && mine[len(mine)-1].Key == r.Key { // compareRecords sorts by key first
			return fmt.Errorf("compare: %q has two algorithms (%s, %s) at %s %s %s", ours, mine[len(mine)-1].Algo, r.Algo, r.Key.Mode, r.Key.DType, r.Key.label())
		}
		mine = append(mine, r)
	}
	if len(mine) == 0 {
		return fmt.Errorf("compare: no submanifold-convolution configuration of %q has a baseline record", ours)
	}
	slices.SortFunc(mine, func(a, b ratioRow) int {
		return cmp.Or(cmp.Compare(rankIn(readmeModes, a.Key.Mode), rankIn(readmeModes, b.Key.Mode)), cmp.Compare(a.Key.Mode, b.Key.Mode),
			cmp.Compare(rankIn(readmeDTypes, a.Key.DType), rankIn(readmeDTypes, b.Key.DType)), cmp.Compare(a.Key.DType, b.Key.DType),
			cmp.Compare(a.Key.RES, b.Key.RES), cmp.Compare(a.Key.C, b.Key.C), cmp.Compare(a.Key.L, b.Key.L))
	})
	fmt.Fprintln(w, "| mode | dtype | RES, C, L | ours ms | FlexGEMM ms | speed vs FlexGEMM | ours useful TFLOP/s | % of 790 | ours / FlexGEMM peak GiB |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|")
	type group struct{ mode, dtype string }
	var groups []group
	byGroup := map[group][]ratioRow{}
	for _, r := range mine {
		fmt.Fprintf(w, "| %s | %s | %d, %d, %d | %.2f | %.2f | %s | %.0f | %.1f %% | %s / %s |\n", r.Key.Mode, r.Key.DType,
			r.Key.RES, r.Key.C, r.Key.L, r.MS, r.BaseMS, readmeRatio(r.Ratio), r.TFLOPS, 100*r.TFLOPS/h200TFLOPS,
			optionalF(r.Peak, "%.4f"), optionalF(r.BasePeak, "%.3f"))
		g := group{r.Key.Mode, r.Key.DType}
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], r)
	}
	fmt.Fprintln(w)
	for _, g := range groups {
		var all, high []float64
		low := byGroup[g][0]
		for _, r := range byGroup[g] {
			all = append(all, r.Ratio)
			if r.Key.RES >= readmeLowRES {
				high = append(high, r.Ratio)
			}
			if r.Ratio < low.Ratio {
				low = r
			}
		}
		fmt.Fprintf(w, "%s %s: geometric mean %.3f× over %d configurations", g.mode, g.dtype, geomean(all), len(all))
		if len(high) > 0 && len(high) < len(all) {
			fmt.Fprintf(w, " (%.3f× over the %d from RES %d up)", geomean(high), len(high), readmeLowRES)
		}
		fmt.Fprintf(w, "; lowest %.3f× at (%d, %d, %d)\n", low.Ratio, low.Key.RES, low.Key.C, low.Key.L)
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
