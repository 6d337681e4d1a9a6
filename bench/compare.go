package main

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// cfgKey is what two records must share to be compared.
type cfgKey struct {
	Op, Mode, DType string
	RES, C, L       int
}

func keyOf(r Record) cfgKey {
	return cfgKey{r.OpOrDefault(), r.Mode, r.DType, r.RES, r.C, r.L}
}

func (k cfgKey) label() string { return fmt.Sprintf("%d,%d,%d", k.RES, k.C, k.L) }

func compareKeys(a, b cfgKey) int {
	return cmp.Or(cmp.Compare(a.Op, b.Op), cmp.Compare(a.Mode, b.Mode), cmp.Compare(a.DType, b.DType),
		cmp.Compare(a.RES, b.RES), cmp.Compare(a.C, b.C), cmp.Compare(a.L, b.L))
}

// ratioRow compares one record with the baseline's record of its config.
type ratioRow struct {
	Key        cfgKey
	Impl, Algo string
	N, BaseN   int
	MS, BaseMS float64
	// TFLOPS and BaseTFLOPS are the useful rates of the two records.
	TFLOPS, BaseTFLOPS float64
	// Ratio is BaseMS / MS: our speed relative to the baseline.
	Ratio float64
	// Peak and BasePeak are the records' peak memory (GB), nil when not
	// measured.
	Peak, BasePeak *float64
}

// series names the bar series of a row in the chart.
func (r ratioRow) series() string {
	return fmt.Sprintf("%s %s %s %s", r.Impl, r.Algo, r.Key.Mode, r.Key.DType)
}

// compareRecords joins every non-baseline record with the baseline record
// of the same config. For repeated records (files appended over several
// runs) the last one counts. It also returns the records that have no
// baseline counterpart. Failed records (Error set) must have been removed.
func compareRecords(recs []Record, base string) (rows []ratioRow, unmatched []Record) {
	type implKey struct {
		impl, algo string
		k          cfgKey
	}
	baseline := map[cfgKey]Record{}
	ours := map[implKey]Record{}
	var order []implKey
	for _, r := range recs {
		if r.Impl == base {
			baseline[keyOf(r)] = r
			continue
		}
		ik := implKey{r.Impl, r.Algo, keyOf(r)}
		if _, seen := ours[ik]; !seen {
			order = append(order, ik)
		}
		ours[ik] = r
	}
	for _, ik := range order {
		r := ours[ik]
		b, ok := baseline[ik.k]
		if !ok {
			unmatched = append(unmatched, r)
			continue
		}
		rows = append(rows, ratioRow{Key: ik.k, Impl: r.Impl, Algo: r.Algo, N: r.N, BaseN: b.N, MS: r.MS, BaseMS: b.MS,
			TFLOPS: r.TFLOPS, BaseTFLOPS: b.TFLOPS, Ratio: b.MS / r.MS, Peak: r.PeakMemGB, BasePeak: b.PeakMemGB})
	}
	slices.SortStableFunc(rows, func(a, b ratioRow) int {
		return cmp.Or(compareKeys(a.Key, b.Key), cmp.Compare(a.Impl, b.Impl), cmp.Compare(a.Algo, b.Algo))
	})
	return rows, unmatched
}

// writeRatioTable prints rows as a markdown table. A config whose voxel
// counts differ is flagged: the two ran different workloads.
func writeRatioTable(w io.Writer, rows []ratioRow, base string) {
	fmt.Fprintf(w, "| op | mode | dtype | RES,C,L | N | impl | algo | ms | %s ms | speed vs %s | TFLOP/s | %s TFLOP/s |\n", base, base, base)
	fmt.Fprintln(w, "|---|---|---|---|---:|---|---|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		n := fmt.Sprint(r.N)
		if r.N != r.BaseN {
			n = fmt.Sprintf("%d (%s: %d, differs!)", r.N, base, r.BaseN)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %.4g | %.4g | %.3f× | %.4g | %.4g |\n",
			r.Key.Op, r.Key.Mode, r.Key.DType, r.Key.label(), n, r.Impl, r.Algo, r.MS, r.BaseMS, r.Ratio, r.TFLOPS, r.BaseTFLOPS)
	}
}

// shortOp abbreviates an op for axis labels ("" for the default).
func shortOp(op string) string {
	switch op {
	case opSubm:
		return ""
	case opDown:
		return "k2s2 "
	case opSample:
		return "gs "
	}
	return op + " "
}

// chartOptions are the knobs of drawRatioChart.
type chartOptions struct {
	// target, when positive, draws a second dashed line at that ratio (a
	// goal such as 1.5: every bar should clear it).
	target float64
}

// axisCut is how far above its typical bar a panel's tallest bar may
// reach before the axis is cut: beyond cutFactor times the panel's median
// ratio (at least 1) the axis ends at cutAt times it, and the cut bars
// carry their value at the top edge, so one 10× bar does not flatten the
// 1.4–1.8× ones that decide a target.
const (
	cutFactor = 3.0
	cutAt     = 2.2
)

// drawRatioChart renders rows as PNG: one panel per (mode, dtype), in each
// one group of bars per (op, RES, C, L) and one bar per (impl, algo), each
// labelled with its ratio, a dashed reference line at 1 and, with
// o.target, a second one at the target. A panel whose tallest bar is far
// above the rest has its axis cut (axisCut).
func drawRatioChart(w io.Writer, rows []ratioRow, base string, o chartOptions) error {
	if len(rows) == 0 {
		return errors.New("no ratios to draw")
	}
	type panelKey struct{ mode, dtype string }
	type groupKey struct {
		op        string
		res, c, l int
	}
	var panels []panelKey
	groups := map[panelKey][]groupKey{}
	series := map[panelKey][]string{}
	value := map[panelKey]map[string]map[groupKey]float64{}
	maxGroups, maxSeries := 0, 0
	for _, r := range rows {
		pk := panelKey{r.Key.Mode, r.Key.DType}
		gk := groupKey{r.Key.Op, r.Key.RES, r.Key.C, r.Key.L}
		sk := r.Impl + " " + r.Algo
		if value[pk] == nil {
			panels = append(panels, pk)
			value[pk] = map[string]map[groupKey]float64{}
		}
		if !slices.Contains(groups[pk], gk) {
			groups[pk] = append(groups[pk], gk)
		}
		if value[pk][sk] == nil {
			series[pk] = append(series[pk], sk)
			value[pk][sk] = map[groupKey]float64{}
		}
		value[pk][sk][gk] = r.Ratio
		maxGroups = max(maxGroups, len(groups[pk]))
		maxSeries = max(maxSeries, len(series[pk]))
	}
	// Size the figure so that the bars (and their labels) of one group
	// never reach the next.
	barW := vg.Points(9)
	groupW := max(barW*vg.Length(maxSeries)+vg.Points(14), vg.Points(46))
	width := max(6*vg.Inch, groupW*vg.Length(maxGroups)+1.2*vg.Inch)
	panelH := 2.6*vg.Inch + vg.Points(11)*vg.Length(maxSeries)
	plots := make([][]*plot.Plot, len(panels))
	for i, pk := range panels {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s %s: speed relative to %s (%s ms / our ms; above 1 is faster)", pk.mode, pk.dtype, base, base)
		p.Y.Label.Text = "speed ratio"
		p.X.Label.Text = "RES, C, L"
		var labels []string
		for _, g := range groups[pk] {
			labels = append(labels, fmt.Sprintf("%s%d,%d,%d", shortOp(g.op), g.res, g.c, g.l))
		}
		var all []float64
		for _, sk := range series[pk] {
			for _, g := range groups[pk] {
				if v, ok := value[pk][sk][g]; ok {
					all = append(all, v)
				}
			}
		}
		top := max(1.0, o.target, slices.Max(all))
		if typical := max(1.0, medianOf(all)); top > cutFactor*typical {
			top = max(cutAt*typical, o.target)
			p.Y.Label.Text += fmt.Sprintf(" (cut at %.2g×)", top)
		}
		n := len(series[pk])
		for j, sk := range series[pk] {
			vals := make(plotter.Values, len(groups[pk]))
			marks := plotter.XYLabels{XYs: make(plotter.XYs, len(groups[pk])), Labels: make([]string, len(groups[pk]))}
			for gi, g := range groups[pk] {
				v, ok := value[pk][sk][g]
				vals[gi] = min(v, top)
				if ok {
					marks.XYs[gi] = plotter.XY{X: float64(gi), Y: min(v, top)}
					marks.Labels[gi] = ratioLabel(v, o.target)
				} else {
					marks.XYs[gi] = plotter.XY{X: float64(gi)}
				}
			}
			bars, err := plotter.NewBarChart(vals, barW)
			if err != nil {
				return err
			}
			bars.LineStyle.Width = 0
			bars.Color = plotutil.Color(j)
			bars.Offset = barW * vg.Length(float64(j)-float64(n-1)/2)
			p.Add(bars)
			p.Legend.Add(sk, bars)
			text, err := plotter.NewLabels(marks)
			if err != nil {
				return err
			}
			for k := range text.TextStyle {
				text.TextStyle[k].XAlign = -0.5 // centred on the bar
				text.TextStyle[k].Font.Size = vg.Points(7)
			}
			text.Offset = vg.Point{X: bars.Offset, Y: vg.Points(2)}
			p.Add(text)
		}
		one := plotter.NewFunction(func(float64) float64 { return 1 })
		one.Color = color.Black
		one.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(one)
		if o.target > 0 {
			goal := plotter.NewFunction(func(float64) float64 { return o.target })
			goal.Color = color.RGBA{R: 0x30, G: 0x60, B: 0xc0, A: 0xff}
			goal.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			p.Add(goal)
			p.Legend.Add(fmt.Sprintf("target %.3g×", o.target), goal)
		}
		p.Legend.Top = true
		p.Legend.Left = true
		p.NominalX(labels...)
		p.Y.Min = 0
		p.Y.Max = top * (1.15 + 0.1*float64(n+1)) // room for the legend and the labels
		p.Y.Tick.Marker = ratioTicks{}
		plots[i] = []*plot.Plot{p}
	}
	img := vgimg.New(width, panelH*vg.Length(len(panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// ratioTicks marks a ratio axis at whole multiples of the smallest step
// of 0.25, 0.5, 1, 2, 5, 10, … that leaves at most five steps between min
// and max, each labelled as briefly as its value allows ("0", "0.5", "2"),
// so that every panel of a chart reads alike (gonum's default ticks gave
// one panel "0.00" and "2.50" beside the others' "0", "1", "2").
type ratioTicks struct{}

// Ticks implements plot.Ticker.
func (ratioTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return nil
	}
	// The smallest of 0.25, 0.5 and 1, 2, 5 × 10^k not below a fifth of
	// the range.
	need := (hi - lo) / 5
	step := 0.25
	if need > 0.5 {
		decade := math.Pow(10, math.Floor(math.Log10(need)))
		step = 10 * decade
		for _, m := range []float64{5, 2, 1} {
			if m*decade >= need {
				step = m * decade
			}
		}
	} else if need > 0.25 {
		step = 0.5
	}
	var ticks []plot.Tick
	for i := math.Ceil(lo / step); i*step <= hi; i++ {
		v := i * step
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return ticks
}

func compareMain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("base", "flexgemm", "impl of the baseline records")
	png := fs.String("png", "", "write a bar chart of the ratios to this PNG file")
	target := fs.Float64("target", 0, "with -png, also draw a dashed line at this ratio (a goal, e.g. 1.5; 0: none)")
	readme := fs.Bool("readme", false, "print the README's performance table of -impl against -base and the geometric means of the ratios instead of the full table")
	impl := fs.String("impl", "flexgemm-go", "with -readme, the impl of the table's \"ours\" columns")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./bench compare [-base impl] [-readme [-impl impl]] [-png file.png [-target ratio]] results.jsonl …")
		fs.PrintDefaults()
	}
	all, err := recordArgs(fs, args)
	if err != nil {
		return err
	}
	var recs, failed []Record
	for _, r := range all {
		if r.Error != "" {
			failed = append(failed, r)
		} else {
			recs = append(recs, r)
		}
	}
	for _, r := range failed {
		fmt.Fprintf(stderr, "compare: failed %s %s %s %s %s %s: %s\n", r.Impl, r.OpOrDefault(), r.Mode, r.DType, r.Algo, keyOf(r).label(), r.Error)
	}
	rows, unmatched := compareRecords(recs, *base)
	if len(rows) == 0 {
		return fmt.Errorf("compare: no record has a %q baseline of the same op, mode, dtype, RES, C and L", *base)
	}
	if *readme {
		if err := writeReadmeTable(stdout, rows, *impl); err != nil {
			return err
		}
	} else {
		writeRatioTable(stdout, rows, *base)
	}
	for _, r := range unmatched {
		fmt.Fprintf(stderr, "compare: no %s record for %s %s %s %s %s\n", *base, r.Impl, r.OpOrDefault(), r.Mode, r.DType, keyOf(r).label())
	}
	if *png != "" {
		var buf bytes.Buffer
		if err := drawRatioChart(&buf, rows, *base, chartOptions{target: *target}); err != nil {
			return err
		}
		if err := os.WriteFile(*png, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "compare: wrote", *png)
	}
	return nil
}

// ratioLabel is a bar's label: the ratio to two decimals, or to three
// where two would round it onto or across the target line (1.497× is not
// 1.50× against a 1.5× target).
func ratioLabel(v, target float64) string {
	if target > 0 && math.Abs(v-target) < 0.01 {
		return fmt.Sprintf("%.3f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}
