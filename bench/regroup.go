package main

import (
	"iter"
	"math/bits"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// regroupMaxRows bounds the maps `bench padding -regroup` regroups: the
// greedy below costs rows × window mask comparisons.
const regroupMaxRows = 1 << 19

// regroupTiles is an experiment of `bench padding -regroup`: it regroups
// the Gray order of ms into tiles of bm rows greedily and returns the new
// order. Each tile starts with the first row of the Gray order not yet
// placed; then, bm − 1 times, it takes the unplaced row among the next
// window rows of the order that adds the fewest taps to the tile's union
// (the earliest on ties). The masked kernels would accept any such order
// (a tile's taps are the union of its rows'); whether it pays depends on
// how many (row, tap) products it saves, which Padding of the result
// tells.
func regroupTiles(ms *kmap.Masked, bm, window int) []int32 {
	g := newRegrouping(ms, window)
	for g.startTile(window) {
		for k := 1; k < bm && len(g.cands) > 0; k++ {
			best, bestAdd := 0, -1
			for i, p := range g.cands {
				if add := g.adds(p); bestAdd < 0 || add < bestAdd {
					best, bestAdd = i, add
					if add == 0 {
						break
					}
				}
			}
			g.take(g.cands[best])
			g.cands = slices.Delete(g.cands, best, best+1)
		}
	}
	return g.order
}

// regrouping is the state both regroup greedies keep: which positions of
// ms.Order are placed, the order built so far, and the current tile's tap
// union and candidates (unplaced positions after its first row).
type regrouping struct {
	ms     *kmap.Masked
	placed []bool // by position in ms.Order
	order  []int32
	union  []uint64
	cands  []int
	next   int // first unplaced position
}

func newRegrouping(ms *kmap.Masked, window int) *regrouping {
	return &regrouping{ms: ms, placed: make([]bool, len(ms.Order)), order: make([]int32, 0, len(ms.Order)),
		union: make([]uint64, ms.Words), cands: make([]int, 0, window)}
}

// mask returns the tap mask of the row at position pos of the Gray order.
func (g *regrouping) mask(pos int) []uint64 {
	r, W := int(g.ms.Order[pos]), g.ms.Words
	return g.ms.Mask[r*W : r*W+W]
}

// adds returns how many taps the row at pos would add to the tile's union.
func (g *regrouping) adds(pos int) int {
	a := 0
	for w, x := range g.mask(pos) {
		a += bits.OnesCount64(x &^ g.union[w])
	}
	return a
}

// place appends the row at pos to the order (its taps must be in the
// union already, or be added by the caller).
func (g *regrouping) place(pos int) {
	g.placed[pos] = true
	g.order = append(g.order, g.ms.Order[pos])
}

// take places the row at pos and adds its taps to the tile's union.
func (g *regrouping) take(pos int) {
	g.place(pos)
	for w, x := range g.mask(pos) {
		g.union[w] |= x
	}
}

// startTile starts a tile with the first unplaced row of the Gray order
// and makes the next window unplaced rows after it the candidates; false
// when every row is placed.
func (g *regrouping) startTile(window int) bool {
	if len(g.order) == len(g.ms.Order) {
		return false
	}
	for g.placed[g.next] {
		g.next++
	}
	g.place(g.next)
	copy(g.union, g.mask(g.next))
	g.cands = g.cands[:0]
	for p := g.next + 1; p < len(g.ms.Order) && len(g.cands) < window; p++ {
		if !g.placed[p] {
			g.cands = append(g.cands, p)
		}
	}
	return true
}

// withOrder returns ms's masks with their rows in order instead.
func withOrder(ms *kmap.Masked, order []int32) *kmap.Masked {
	return &kmap.Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Order: order}
}

// orderTiles returns the tap unions of tiles of bm consecutive rows of
// order over the masks of ms (kmap's Tiles(bm) of the masks in that order).
func orderTiles(ms *kmap.Masked, order []int32, bm int) *kmap.Tiles {
	return withOrder(ms, order).Tiles(bm)
}

// orderWork returns the (row, tap) products a masked GEMM computes with
// tiles of bm consecutive rows of order over the masks of ms.
func orderWork(ms *kmap.Masked, order []int32, bm int) int64 {
	return orderTiles(ms, order, bm).Work
}

// regroupWindows is regroupTiles applied to each window of window rows of
// the Gray order on its own (the last window may be shorter): the rows of a
// window are regrouped among themselves, as one GPU block per window would
// do it. An experiment of `bench padding -regroup W -windows`.
func regroupWindows(ms *kmap.Masked, bm, window int) []int32 {
	out := make([]int32, 0, len(ms.Order))
	for sub := range orderWindows(ms, window) {
		out = append(out, regroupTiles(sub, bm, window)...)
	}
	return out
}

// orderWindows yields ms restricted to each window of window rows of its
// Gray order in turn (the last may be shorter).
func orderWindows(ms *kmap.Masked, window int) iter.Seq[*kmap.Masked] {
	return func(yield func(*kmap.Masked) bool) {
		for s := 0; s < len(ms.Order); s += window {
			if !yield(withOrder(ms, ms.Order[s:min(s+window, len(ms.Order))])) {
				return
			}
		}
	}
}

// regroupByPasses is regroupTiles computed the way one GPU block per
// window would (`bench padding -regroup W -windows` reports its passes):
// in passes over the tile's candidates, each of which first takes, in
// order, every candidate whose taps are all in the tile's union (up to the
// tile's capacity: the greedy takes them one by one, earliest first, and
// the union does not change), then, if the tile is not full, the earliest
// candidate that adds the fewest taps, which grows the union. Same order
// as regroupTiles (TestRegroupByPasses); passes counts the scans of the
// candidates, one per union growth and one to start each tile.
func regroupByPasses(ms *kmap.Masked, bm, window int) (order []int32, passes int) {
	g := newRegrouping(ms, window)
	for g.startTile(window) {
		room := bm - 1
		for room > 0 && len(g.cands) > 0 {
			passes++
			best, bestAdd := -1, 0
			kept := g.cands[:0]
			for _, p := range g.cands {
				a := g.adds(p)
				switch {
				case a == 0 && room > 0:
					g.place(p)
					room--
					continue
				case a > 0 && (best < 0 || a < bestAdd):
					best, bestAdd = len(kept), a
				}
				kept = append(kept, p)
			}
			g.cands = kept
			if room == 0 || best < 0 {
				continue
			}
			g.take(g.cands[best])
			room--
			g.cands = slices.Delete(g.cands, best, best+1)
		}
	}
	return g.order, passes
}

// windowPasses returns the mean and the largest number of passes
// regroupByPasses makes over one window of window rows of the Gray order
// of ms (the last window may be shorter): what one GPU block per window
// would scan in sequence.
func windowPasses(ms *kmap.Masked, bm, window int) (mean float64, most int) {
	total, windows := 0, 0
	for sub := range orderWindows(ms, window) {
		_, p := regroupByPasses(sub, bm, window)
		total += p
		most = max(most, p)
		windows++
	}
	if windows == 0 {
		return 0, 0
	}
	return float64(total) / float64(windows), most
}
