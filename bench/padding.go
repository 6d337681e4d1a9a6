package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// paddingMain is `bench padding`: for the sphere shells of the benchmark
// grid, how much work the masked algorithms waste in padding. Each tile of
// BM rows of the Gray-code order multiplies the union of its rows' taps,
// so it computes Σ_tiles |union|·rows (row, tap) products where the
// convolution needs only the map's pairs; the ratio (kmap.Stats.Padding,
// ≥ 1) bounds the useful share of a masked GEMM's tensor-core work. It
// reports the padding of the Gray order and of the engines' order (the
// Gray order regrouped where kmap.Regroups says so). CPU only: the maps
// are built by package kmap (the GPU builds the same maps and the same
// orders on the device). With -regroup W it also reports the padding of
// an experimental greedy regrouping of the Gray order into tiles with a
// sliding window of W rows (regroupTiles), and with -windows that of the
// engines' greedy within disjoint windows of W rows (regroupWindows, as
// one GPU block per window runs it) and the passes over its candidates
// such a block makes, and with -fullfirst too that of the same greedy
// over only the rows that do not fill whole tiles of their mask class
// (regroupRemainders); with -merge that of an order built by rounds of
// mutual-best merges of those rows (regroupMerge); with -halo the padding of tiles of the
// z-order of the coordinates and, for both orders, the distinct input rows
// per tile relative to the pairs (tileHaloRows); with -bytes C the bytes a
// forward gather of C channels reads from L2 with either kind of tile
// (gatherBytes); with -halves V,… the balance of a two-block design with
// resident weights, those taps in both (halfBalance) and, with -bytes, its
// row bytes; with -graywindows W,… the padding of Gray orders sorted
// within windows of W input rows (grayInWindows) and, with -bytes, the
// bytes of input rows a gather reads from DRAM in a cache model
// (dramRowReads); with -wgrad G,… the products and rows read of a
// multi-tap weight gradient over the Gray order (multiTapTraffic, a
// design) relative to the pairs kernels; with -brickwindow W the locality
// of the GPU brick search's windows of W bricks in claim order and in
// z-order (brickWindowLocality); with -graydrop K,… the padding of Gray
// orders sorted by the ranks' high bits only, their K lowest dropped
// (grayDropping: a radix sort of fewer passes).
func paddingMain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench padding", flag.ContinueOnError)
	fs.SetOutput(stderr)
	res := fs.String("res", "8,16,32,64,128,256,512,1024", "sphere-shell resolutions")
	rows := fs.String("rows", "64,128,256", "tile heights (BM) to report")
	regroup := fs.Int("regroup", 0, "also report the padding after a greedy regrouping of the Gray order into tiles, each row chosen among the next `W` rows (0: off; maps of at most 2^19 rows unless -windows)")
	windows := fs.Bool("windows", false, "with -regroup W: regroup each window of W rows of the Gray order on its own instead of a sliding window, and report the passes per window of the GPU design (kmap.RegroupWindow; any number of rows)")
	merge := fs.Bool("merge", false, "also report the padding of an order built by rounds of mutual-best merges of the rows that do not fill whole tiles of their mask class, and the rounds (regroupMerge; slow on the CPU at RES ≥ 512)")
	fullFirst := fs.Bool("fullfirst", false, "with -regroup W -windows: each mask class's whole tiles first, only the rows left over regrouped in windows of W (regroupRemainders)")
	halo := fs.Bool("halo", false, "also report the padding of tiles in z-order and, for tiles in Gray order and in z-order, the distinct input rows of each tile summed over the tiles relative to the pairs (what a gather reading each tile's neighbourhood once would read; today's read one row per pair)")
	bytesC := fs.Int("bytes", 0, "also report, for C → C layers of `C` channels (fp16), the gigabytes a forward gather reads from L2 per layer: today's Gray tiles (one input row per pair) and z-order and Hilbert tiles reading each tile's distinct rows once, with their padding and the most distinct rows of one tile (gatherBytes; 0: off)")
	halves := fs.String("halves", "", "also report, for tiles of the engines' order, the balance of a design that splits each tile's taps between the two blocks of a cluster, each keeping half the taps' weights resident and both these taps `V,…` (13: the centre of 3×3×3): halfBalance, the share of the pair's tap iterations that do work; with -bytes C also the gigabytes its forward reads from L2 (rows only)")
	wgrad := fs.String("wgrad", "", "also report, for these tap-group sizes `G,…`, the rows a multi-tap weight gradient over the Gray order would read, relative to the pairs kernels (multiTapTraffic)")
	wgradRows := fs.Int("wgradrows", 32, "rows per K slab of the multi-tap weight gradient (-wgrad)")
	grayWindows := fs.String("graywindows", "", "also report, for Gray orders sorted within each window of `W,…` consecutive input rows (a window of at least the rows: one order over all of them; grayInWindows), their padding and, with -bytes C, the gigabytes of input rows a forward gather reads from DRAM per layer in the cache model of dramRowReads (waves of -wavetiles tiles, an L2 of -cachemb MB)")
	waveTiles := fs.Int("wavetiles", 264, "tiles a gather runs at once, for -graywindows (264: two blocks per SM on 132 SMs)")
	cacheMB := fs.Int("cachemb", 40, "MB of L2 that keep input rows between waves, for -graywindows")
	brickWindow := fs.Int("brickwindow", 0, "also report, for the GPU brick search's windows of `W` consecutive bricks (5280: 8 warps × 5 blocks × 132 SMs), the share of the bricks' neighbours outside their window and of the neighbour table's 32-byte sectors a window writes in part, with the bricks in claim order and in z-order (brickWindowLocality; 0: off)")
	grayDrop := fs.String("graydrop", "", "also report, for each `K,…`, the padding of the Gray order sorted by the rows' Gray ranks without their K lowest bits, rows of equal high bits in index order (grayDropping: what a radix sort of fewer passes would cost)")
	sparseTaps := fs.String("sparsetaps", "", "also report, for tiles of the engines' order and each fraction `F,…`, a hybrid gather that moves the taps fewer than F of a tile's rows hold out of the masked tile into per-tap slots (sparseTapSplit): the share of the padding it removes, the share of the pairs it moves, and the products of both parts relative to the pairs")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rs, err := parseInts(*res)
	if err == nil && len(rs) == 0 {
		err = errors.New("empty list")
	}
	if err != nil {
		return fmt.Errorf("-res: %w", err)
	}
	bms, err := parseInts(*rows)
	if err == nil && len(bms) == 0 {
		err = errors.New("empty list")
	}
	if err != nil {
		return fmt.Errorf("-rows: %w", err)
	}
	if *regroup < 0 {
		return fmt.Errorf("-regroup %d must not be negative", *regroup)
	}
	var groups []int
	if *wgrad != "" {
		if groups, err = parseInts(*wgrad); err != nil {
			return fmt.Errorf("-wgrad: %w", err)
		}
		if *wgradRows <= 0 {
			return fmt.Errorf("-wgradrows %d must be positive", *wgradRows)
		}
	}
	cols := []string{"RES", "N", "pairs", "taps present"}
	for _, bm := range bms {
		cols = append(cols, fmt.Sprintf("Gray order padding BM %d", bm))
	}
	for _, bm := range bms {
		cols = append(cols, fmt.Sprintf("padding BM %d", bm))
	}
	if *windows && *regroup == 0 {
		return errors.New("-windows needs -regroup W")
	}
	if *fullFirst && !*windows {
		return errors.New("-fullfirst needs -regroup W -windows")
	}
	if *regroup > 0 {
		name := "regrouped"
		if *windows {
			name = fmt.Sprintf("regrouped in windows of %d", *regroup)
			if *fullFirst {
				name = fmt.Sprintf("whole class tiles first, the rest regrouped in windows of %d", *regroup)
			}
		}
		for _, bm := range bms {
			cols = append(cols, fmt.Sprintf("%s BM %d", name, bm))
		}
		if *windows {
			// The GPU design's latency: one block per window scans its
			// candidates once per pass (regroupByPasses).
			for _, bm := range bms {
				cols = append(cols, fmt.Sprintf("passes per window, mean / max, BM %d", bm))
			}
		}
	}
	if *merge {
		for _, bm := range bms {
			cols = append(cols, fmt.Sprintf("merged BM %d (rounds)", bm))
		}
	}
	if *halo {
		for _, bm := range bms {
			cols = append(cols, fmt.Sprintf("z-order padding BM %d", bm), fmt.Sprintf("Gray rows read BM %d", bm), fmt.Sprintf("z-order rows read BM %d", bm))
		}
	}
	if *bytesC < 0 {
		return fmt.Errorf("-bytes %d must not be negative", *bytesC)
	}
	if *bytesC > 0 {
		for _, bm := range bms {
			cols = append(cols, fmt.Sprintf("GB read C %d, Gray BM %d (rows + weights)", *bytesC, bm))
			for _, curve := range []string{"z-order", "Hilbert"} {
				cols = append(cols, fmt.Sprintf("GB read C %d, %s once BM %d (rows + weights)", *bytesC, curve, bm),
					fmt.Sprintf("%s padding, most rows of a tile, BM %d", curve, bm))
			}
		}
	}
	var windowRows []int
	if *grayWindows != "" {
		if windowRows, err = parseInts(*grayWindows); err != nil {
			return fmt.Errorf("-graywindows: %w", err)
		}
		if *waveTiles <= 0 || *cacheMB < 0 {
			return fmt.Errorf("-wavetiles %d must be positive and -cachemb %d not negative", *waveTiles, *cacheMB)
		}
		for _, w := range windowRows {
			for _, bm := range bms {
				cols = append(cols, fmt.Sprintf("Gray in windows of %d, padding BM %d", w, bm))
				if *bytesC > 0 {
					cols = append(cols, fmt.Sprintf("GB from DRAM, windows of %d, BM %d", w, bm))
				}
			}
		}
	}
	if *brickWindow < 0 {
		return fmt.Errorf("-brickwindow %d must not be negative", *brickWindow)
	}
	if *brickWindow > 0 {
		for _, order := range []string{"claim order", "z-order"} {
			cols = append(cols, fmt.Sprintf("bricks in %s: neighbours outside / sectors in part, windows of %d", order, *brickWindow))
		}
	}
	var flexible []int32
	if *halves != "" {
		vs, err := parseInts(*halves)
		if err != nil {
			return fmt.Errorf("-halves: %w", err)
		}
		for _, v := range vs {
			flexible = append(flexible, int32(v))
		}
		for _, bm := range bms {
			cols = append(cols, fmt.Sprintf("halves' balance BM %d", bm))
			if *bytesC > 0 {
				cols = append(cols, fmt.Sprintf("GB read C %d, resident halves BM %d (rows)", *bytesC, bm))
			}
		}
	}
	var drops []int
	if *grayDrop != "" {
		if drops, err = parseInts(*grayDrop); err != nil {
			return fmt.Errorf("-graydrop: %w", err)
		}
		for _, k := range drops {
			for _, bm := range bms {
				cols = append(cols, fmt.Sprintf("Gray without %d low rank bits, padding BM %d", k, bm))
			}
		}
	}
	var fracs []float64
	if *sparseTaps != "" {
		for _, f := range strings.Split(*sparseTaps, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 {
				return fmt.Errorf("-sparsetaps: %q is not a positive fraction", f)
			}
			fracs = append(fracs, v)
		}
		for _, f := range fracs {
			for _, bm := range bms {
				cols = append(cols, fmt.Sprintf("taps under %g of a tile's rows, BM %d: padding removed / pairs moved / products", f, bm))
			}
		}
	}
	if len(groups) > 0 {
		cols = append(cols, fmt.Sprintf("wgrad products, %d-row slabs", *wgradRows))
		for _, g := range groups {
			cols = append(cols, fmt.Sprintf("wgrad rows read, %d-tap groups", g))
		}
	}
	fmt.Fprintf(stdout, "| %s |\n|%s\n", strings.Join(cols, " | "), strings.Repeat("---:|", len(cols)))
	for _, r := range rs {
		m, err := shellMap(r)
		if err != nil {
			return fmt.Errorf("RES %d: %w", r, err)
		}
		st := m.Stats(0)
		fmt.Fprintf(stdout, "| %d | %d | %d | %.1f %% |", r, st.NOut, st.Pairs, 100*st.Density)
		for _, bm := range bms {
			if st.Pairs == 0 {
				fmt.Fprintf(stdout, " – |")
				continue
			}
			ms := m.Masked()
			fmt.Fprintf(stdout, " %.3f× |", float64(orderWork(ms, ms.Gray, bm))/float64(st.Pairs))
		}
		for _, bm := range bms {
			fmt.Fprintf(stdout, " %.3f× |", m.Stats(bm).Padding)
		}
		if *regroup > 0 {
			type windowPasses struct {
				mean float64
				most int
			}
			passes := make(map[int]windowPasses)
			for _, bm := range bms {
				if (!*windows && st.NOut > regroupMaxRows) || st.Pairs == 0 {
					fmt.Fprintf(stdout, " – |")
					continue
				}
				ms := m.Masked()
				var order []int32
				if *windows {
					var p windowPasses
					if *fullFirst {
						order, p.mean, p.most = regroupRemainders(ms, bm, *regroup)
					} else {
						order, p.mean, p.most = regroupWindows(ms, bm, *regroup)
					}
					passes[bm] = p
				} else {
					order = regroupTiles(withOrder(ms, ms.Gray), bm, *regroup)
				}
				fmt.Fprintf(stdout, " %.3f× |", float64(orderWork(ms, order, bm))/float64(st.Pairs))
			}
			if *windows {
				for _, bm := range bms {
					if st.Pairs == 0 {
						fmt.Fprintf(stdout, " – |")
						continue
					}
					fmt.Fprintf(stdout, " %.0f / %d |", passes[bm].mean, passes[bm].most)
				}
			}
		}
		if *merge {
			for _, bm := range bms {
				if st.Pairs == 0 {
					fmt.Fprintf(stdout, " – |")
					continue
				}
				ms := m.Masked()
				order, rounds := regroupMerge(ms, bm)
				fmt.Fprintf(stdout, " %.3f× (%d) |", float64(orderWork(ms, order, bm))/float64(st.Pairs), rounds)
			}
		}
		if *halo {
			z, err := zOrder(m)
			if err != nil {
				return fmt.Errorf("RES %d: %w", r, err)
			}
			for _, bm := range bms {
				if st.Pairs == 0 {
					fmt.Fprint(stdout, " – | – | – |")
					continue
				}
				p := float64(st.Pairs)
				fmt.Fprintf(stdout, " %.3f× | %.2f | %.2f |", float64(orderWork(m.Masked(), z, bm))/p,
					float64(tileHaloRows(m, m.Masked().Order, bm))/p, float64(tileHaloRows(m, z, bm))/p)
			}
		}
		if *bytesC > 0 {
			var curves [][]int32
			for _, mode := range []serialize.Mode{serialize.ZOrder, serialize.Hilbert} {
				o, err := curveOrder(m, mode)
				if err != nil {
					return fmt.Errorf("RES %d: %w", r, err)
				}
				curves = append(curves, o)
			}
			gb := func(a, b int64) string { return fmt.Sprintf("%.2f + %.2f", float64(a)/1e9, float64(b)/1e9) }
			ms := m.Masked()
			for _, bm := range bms {
				gr, gw := gatherBytes(st.Pairs, ms.Tiles(bm), *bytesC, 2)
				fmt.Fprintf(stdout, " %s |", gb(gr, gw))
				for _, o := range curves {
					tiles := orderTiles(ms, o, bm)
					halo, most := tileHaloStats(m, o, bm)
					cr, cw := gatherBytes(halo, tiles, *bytesC, 2)
					fmt.Fprintf(stdout, " %s | %.3f×, %d |", gb(cr, cw), float64(tiles.Work)/float64(max(st.Pairs, 1)), most)
				}
			}
		}
		if len(windowRows) > 0 {
			ms := m.Masked()
			rowBytes := 2 * *bytesC
			for _, w := range windowRows {
				order := grayInWindows(ms, w)
				for _, bm := range bms {
					fmt.Fprintf(stdout, " %.3f× |", float64(orderWork(ms, order, bm))/float64(max(st.Pairs, 1)))
					if *bytesC > 0 {
						reads := dramRowReads(m.Nbr, m.V(), order, bm, *waveTiles, *cacheMB<<20/rowBytes)
						fmt.Fprintf(stdout, " %.3f |", float64(reads)*float64(rowBytes)/1e9)
					}
				}
			}
		}
		if *brickWindow > 0 {
			for _, curve := range []bool{false, true} {
				outside, partial := brickWindowLocality(m.OutCoords, *brickWindow, curve)
				fmt.Fprintf(stdout, " %.1f %% / %.1f %% |", 100*outside, 100*partial)
			}
		}
		if *halves != "" {
			ms := m.Masked()
			for _, bm := range bms {
				tiles := ms.Tiles(bm)
				fmt.Fprintf(stdout, " %.3f |", halfBalance(tiles, m.V(), flexible))
				if *bytesC > 0 {
					rows, _ := gatherBytes(st.Pairs, tiles, *bytesC, 2)
					fmt.Fprintf(stdout, " %.2f |", float64(rows)/1e9)
				}
			}
		}
		for _, k := range drops {
			ms := m.Masked()
			order, err := grayDropping(ms, k)
			if err != nil {
				return fmt.Errorf("RES %d: %w", r, err)
			}
			for _, bm := range bms {
				fmt.Fprintf(stdout, " %.3f× |", float64(orderWork(ms, order, bm))/float64(max(st.Pairs, 1)))
			}
		}
		for _, f := range fracs {
			ms := m.Masked()
			for _, bm := range bms {
				work, padding, moved := sparseTapSplit(ms, bm, f)
				if st.Pairs == 0 || work == st.Pairs {
					fmt.Fprintf(stdout, " – / – / %.3f× |", float64(work)/float64(max(st.Pairs, 1)))
					continue
				}
				fmt.Fprintf(stdout, " %.1f %% / %.1f %% / %.3f× |", 100*float64(padding)/float64(work-st.Pairs),
					100*float64(moved)/float64(st.Pairs), float64(work-padding)/float64(st.Pairs))
			}
		}
		if len(groups) > 0 {
			if st.Pairs == 0 {
				fmt.Fprint(stdout, strings.Repeat(" – |", 1+len(groups)))
			} else {
				// Relative to the pairs kernels: pairs products, one dy row
				// and one x row per pair. The slabs multiply what tiles of
				// their height do.
				fmt.Fprintf(stdout, " %.2f× |", m.Stats(*wgradRows).Padding)
				ms := m.Masked()
				for _, g := range groups {
					dy := multiTapTraffic(ms, ms.Order, *wgradRows, g)
					fmt.Fprintf(stdout, " %.2f× |", float64(st.Pairs+dy)/float64(2*st.Pairs))
				}
			}
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// shellMap returns the 3×3×3 submanifold map of the benchmark's sphere
// shell of resolution res (one batch), built on the host.
func shellMap(res int) (*kmap.Map, error) {
	coords, ext := synth.SphereShell(res, 1)
	return kmap.NewSubmanifold(coords, ext, kernel3, dilation1)
}
