package main

import (
	"container/heap"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// pairschedMain is `bench pairsched`: a model of how long the CUDA
// engine's weight-gradient launch with the window split (row slices, the
// large maps) takes with its blocks in their launch order and in other
// orders, for the submanifold 3×3×3 map of a sphere shell. A block of the
// launch is one output tile, one tap and one split: split z covers the
// output rows of chunks [⌊z·nc/s⌋, ⌊(z+1)·nc/s⌋) of 256 rows in every tap
// (PairsParams.off), the centre tap every one of those rows, a tap before
// it its pairs there, a tap after it those of its mirror tap. A block
// takes setup + ⌈pairs/BK⌉ time units; the blocks are dispatched in
// order, each to the SM that frees first, one block per SM at a time (the
// Hopper pairs tiles of the large maps fill an SM's shared memory). The
// launch order is tile fastest, then tap, then split (blockIdx.x, y, z);
// the other orders sort the blocks of every group of g consecutive splits
// longest first (g = all: plain longest-first), or only those of the last
// g splits, or order the taps of each group by their offset's length
// (centre, faces, edges, corners: no counts needed). It prints the time of
// each order against the launch order's and the lower bound (the total
// over the SMs, or the longest block). With -balanced C it models the
// balanced split of the smaller maps instead (balancedLaunch). CPU only;
// a model that knows
// nothing of memory (the split is z-major for the L2's sake, which a
// reordering across many splits gives up) — for designing, not measuring.
func pairschedMain(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench pairsched", flag.ContinueOnError)
	fs.SetOutput(stderr)
	res := fs.Int("res", 256, "sphere-shell resolution")
	splits := fs.Int("splits", 18, "window splits (the engine's windowPairsSplits: 18 at RES 256 C 256, 126 at RES 512 C 128, 503 at RES 1024 C 64)")
	tiles := fs.Int("tiles", 2, "output tiles per tap (Co/BM · Ci/BN: 2 for the 128×256 tile at C 256, 1 for 128×128 at C 128)")
	bk := fs.Int("bk", 64, "pairs per reduction step of the tile")
	sms := fs.Int("sms", 132, "multiprocessors")
	setup := fs.Int("setup", 6, "time units a block takes besides its steps (index loads, pipeline fill, stores)")
	groups := fs.String("groups", "1,2,3,4,6,8", "group sizes g (in splits) of the reorderings")
	balanced := fs.Int("balanced", 0, "model the balanced split instead (the maps below the window split's size), for C → C layers of `C` channels: the engine's chunk and split count (balancedPairsSplits, Hopper tile, fp16 partials cap) replace -splits")
	if err := fs.Parse(args); err != nil {
		return err
	}
	gs, err := parseInts(*groups)
	if err != nil {
		return fmt.Errorf("-groups: %w", err)
	}
	if *res < 2 || *splits < 1 || *tiles < 1 || *bk < 1 || *sms < 1 || *setup < 0 {
		return errors.New("-res ≥ 2, -splits, -tiles, -bk, -sms ≥ 1 and -setup ≥ 0 please")
	}
	m, err := shellMap(*res)
	if err != nil {
		return err
	}
	var l *pairLaunch
	kind := "window"
	if *balanced > 0 {
		l = balancedLaunch(m, *balanced, *tiles, *bk, *setup, *sms)
		kind = "balanced"
	} else {
		l = splitLaunch(m, *splits, *tiles, *bk, *setup)
	}
	base := l.makespan(l.launchOrder(), *sms)
	fmt.Fprintf(stdout, "RES %d (%s split): %d rows, %d splits × %d taps × %d tiles = %d blocks on %d SMs; lower bound %d, launch order %d (%+.1f %%)\n",
		*res, kind, m.NOut, l.splits, l.taps, *tiles, len(l.dur), *sms, l.lowerBound(*sms), base, pct(base, l.lowerBound(*sms)))
	fmt.Fprintln(stdout, "| reordering | g = "+joinInts(gs, " | g = ")+" |")
	fmt.Fprintln(stdout, "|---|"+strings.Repeat("---:|", len(gs)))
	for _, row := range []struct {
		name  string
		order func(g int) []int
	}{
		{"longest first in groups of g splits", func(g int) []int { return l.groupOrder(g, l.byDuration) }},
		{"longest first in the last g splits", func(g int) []int { return l.tailOrder(g) }},
		{"taps by offset length in groups of g splits", func(g int) []int { return l.groupOrder(g, l.byOffset) }},
	} {
		fmt.Fprintf(stdout, "| %s |", row.name)
		for _, g := range gs {
			fmt.Fprintf(stdout, " %+.1f %% |", pct(l.makespan(row.order(g), *sms), base))
		}
		fmt.Fprintln(stdout)
	}
	all := l.groupOrder(l.splits, l.byDuration)
	fmt.Fprintf(stdout, "longest first over all splits: %+.1f %%\n", pct(l.makespan(all, *sms), base))
	return nil
}

// pairLaunch is the model of one weight-gradient launch: dur[b] is the
// time of block b = (z·taps + v)·tiles + x in launch order.
type pairLaunch struct {
	splits, taps, tiles int
	dur                 []int
	offLen              []int // per tap: |dx| + |dy| + |dz| of its offset
}

// splitLaunch models the window split of m (a submanifold map of 27 taps).
func splitLaunch(m *kmap.Map, splits, tiles, bk, setup int) *pairLaunch {
	V := m.V()
	H := V / 2
	nc := (m.NOut + 255) / 256
	l := newPairLaunch(splits, m.Conv, tiles)
	for z := range splits {
		r0, r1 := nc*z/splits*256, min(nc*(z+1)/splits*256, m.NOut)
		per := make([]int, V)
		for o := r0; o < r1; o++ {
			for v, i := range m.Nbr[o*V : o*V+V] {
				if i >= 0 {
					per[v]++
				}
			}
		}
		for v := range V {
			n := per[v]
			switch {
			case v == H:
				n = r1 - r0
			case v > H:
				n = per[V-1-v]
			}
			for range tiles {
				l.dur = append(l.dur, setup+(n+bk-1)/bk)
			}
		}
	}
	return l
}

// balancedLaunch models the balanced split of m's weight gradient for
// C → C layers with a Hopper tile (cudaext balancedPairsSplits): every
// block gets about chunk reduction steps, tap v ⌈steps(v)/chunk⌉ slices of
// the splits (its other blocks return at once: one time unit), slice z of
// a tap an equal share of its steps.
func balancedLaunch(m *kmap.Map, c, tiles, bk, setup, sms int) *pairLaunch {
	V := m.V()
	H := V / 2
	steps := make([]int, V)
	for o := range m.NOut {
		for v, i := range m.Nbr[o*V : o*V+V] {
			if i >= 0 && v < H {
				steps[v]++
			}
		}
	}
	steps[H] = m.NOut
	for v := H + 1; v < V; v++ {
		steps[v] = steps[V-1-v]
	}
	longest, total := 0, 0
	for v := range V {
		steps[v] = (steps[v] + bk - 1) / bk
		longest = max(longest, steps[v])
		total += steps[v]
	}
	// The engine's constants: hopperBalancedWaves 6, pairsMinIters 8,
	// pairsMaxSplits 64, pairsPartBytes 512 MiB.
	splits, chunk := 1, 0
	if target := 6 * sms; tiles*V < target && longest > 1 {
		chunk = max((tiles*total+target-1)/target, 8)
		s := min((longest+chunk-1)/chunk, 64, max((512<<20)/(4*c*V*c), 1))
		if s > 1 {
			splits, chunk = s, max(chunk, (longest+s-1)/s)
		}
	}
	l := newPairLaunch(splits, m.Conv, tiles)
	for z := range splits {
		for v := range V {
			sv := splits
			if chunk > 0 {
				sv = min(splits, max(1, (steps[v]+chunk-1)/chunk))
			}
			d := 1 // a slice the tap does not use
			if z < sv {
				t0, t1 := (steps[v]*z+sv-1)/sv, (steps[v]*(z+1)+sv-1)/sv
				d = setup + t1 - t0
			}
			for range tiles {
				l.dur = append(l.dur, d)
			}
		}
	}
	return l
}

// newPairLaunch returns a launch of splits × taps × tiles blocks of the
// map of conv (their durations still to be appended) and the offset
// length, in taps from the kernel's centre, of each of its taps.
func newPairLaunch(splits int, conv grid.Conv, tiles int) *pairLaunch {
	l := &pairLaunch{splits: splits, taps: conv.Volume(), tiles: tiles}
	for v := range l.taps {
		k, n := conv.Tap(v), 0
		for a := range k {
			n += abs(k[a] - conv.Kernel[a]/2)
		}
		l.offLen = append(l.offLen, n)
	}
	return l
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func (l *pairLaunch) launchOrder() []int {
	o := make([]int, len(l.dur))
	for i := range o {
		o[i] = i
	}
	return o
}

// byDuration orders blocks longest first (ties in launch order).
func (l *pairLaunch) byDuration(a, b int) int {
	if l.dur[a] != l.dur[b] {
		return l.dur[b] - l.dur[a]
	}
	return a - b
}

// byOffset orders blocks by their tap's offset length, then by tap, split
// and tile (the order of the engine's design, fg::pairs_block_of).
func (l *pairLaunch) byOffset(a, b int) int {
	ta, tb := a/l.tiles%l.taps, b/l.tiles%l.taps
	if l.offLen[ta] != l.offLen[tb] {
		return l.offLen[ta] - l.offLen[tb]
	}
	if ta != tb {
		return ta - tb
	}
	return a - b
}

// groupOrder sorts the blocks of every g consecutive splits by cmp.
func (l *pairLaunch) groupOrder(g int, cmp func(a, b int) int) []int {
	o := l.launchOrder()
	per := l.taps * l.tiles
	for z0 := 0; z0 < l.splits; z0 += g {
		slices.SortFunc(o[z0*per:min(l.splits, z0+g)*per], cmp)
	}
	return o
}

// tailOrder sorts the blocks of the last g splits longest first.
func (l *pairLaunch) tailOrder(g int) []int {
	o := l.launchOrder()
	slices.SortFunc(o[max(l.splits-g, 0)*l.taps*l.tiles:], l.byDuration)
	return o
}

func (l *pairLaunch) lowerBound(sms int) int {
	total, longest := 0, 0
	for _, d := range l.dur {
		total += d
		longest = max(longest, d)
	}
	return max((total+sms-1)/sms, longest)
}

// makespan dispatches the blocks in order to the SM that frees first.
func (l *pairLaunch) makespan(order []int, sms int) int {
	free := make(smQueue, sms)
	heap.Init(&free)
	end := 0
	for _, b := range order {
		t := free[0] + l.dur[b]
		free[0] = t
		heap.Fix(&free, 0)
		end = max(end, t)
	}
	return end
}

// smQueue is a min-heap of the times the SMs free.
type smQueue []int

func (q smQueue) Len() int           { return len(q) }
func (q smQueue) Less(i, j int) bool { return q[i] < q[j] }
func (q smQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *smQueue) Push(x any)        { *q = append(*q, x.(int)) }
func (q *smQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

func pct(a, b int) float64 { return 100 * (float64(a)/float64(b) - 1) }

func joinInts(v []int, sep string) string {
	s := ""
	for i, x := range v {
		if i > 0 {
			s += sep
		}
		s += fmt.Sprint(x)
	}
	return s
}
