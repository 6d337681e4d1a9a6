package main

import (
	"math/bits"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// regroupMaxRows bounds the maps `bench padding -regroup` regroups: the
// greedy below costs rows × window mask comparisons.
const regroupMaxRows = 1 << 19

// regroupTiles is an experiment of `bench padding -regroup`: it regroups
// the order of ms (the Gray order, as the caller passes it) into tiles of
// bm rows greedily and returns the new order. Each tile starts with the
// first row of the Gray order not yet placed; then, bm − 1 times, it takes
// the unplaced row among the next window rows of the order that adds the
// fewest taps to the tile's union (the earliest on ties). The masked kernels would accept any such order
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

// regrouping is regroupTiles' state: which positions of ms.Order are
// placed, the order built so far, and the current tile's tap union and
// candidates (unplaced positions after its first row).
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

// regroupWindows is the engines' regrouping (kmap.RegroupWindow) of each
// window of window rows of the Gray order of ms (the last may be shorter)
// into tiles of bm rows, with the mean and the largest number of passes
// over one window: what one GPU block per window scans in sequence. An
// experiment of `bench padding -regroup W -windows` (the engines use
// kmap.RegroupWindowRows and kmap.RegroupTileRows).
func regroupWindows(ms *kmap.Masked, bm, window int) (order []int32, mean float64, most int) {
	order = make([]int32, len(ms.Gray))
	total, windows := 0, 0
	for lo := 0; lo < len(ms.Gray); lo += window {
		hi := min(lo+window, len(ms.Gray))
		p := kmap.RegroupWindow(ms.Mask, ms.Gray[lo:hi], bm, order[lo:hi])
		total += p
		most = max(most, p)
		windows++
	}
	if windows > 0 {
		mean = float64(total) / float64(windows)
	}
	return order, mean, most
}
