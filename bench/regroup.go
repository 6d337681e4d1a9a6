package main

import (
	"math/bits"

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
	n, W := len(ms.Order), ms.Words
	placed := make([]bool, n) // by position in ms.Order
	out := make([]int32, 0, n)
	union := make([]uint64, W)
	cands := make([]int, 0, window)
	mask := func(pos int) []uint64 { r := int(ms.Order[pos]); return ms.Mask[r*W : r*W+W] }
	next := 0 // first unplaced position
	for len(out) < n {
		for placed[next] {
			next++
		}
		placed[next] = true
		out = append(out, ms.Order[next])
		copy(union, mask(next))
		cands = cands[:0]
		for p := next + 1; p < n && len(cands) < window; p++ {
			if !placed[p] {
				cands = append(cands, p)
			}
		}
		for k := 1; k < bm && len(cands) > 0; k++ {
			best, bestAdd := 0, -1
			for i, p := range cands {
				add := 0
				for w, x := range mask(p) {
					add += bits.OnesCount64(x &^ union[w])
				}
				if bestAdd < 0 || add < bestAdd {
					best, bestAdd = i, add
					if add == 0 {
						break
					}
				}
			}
			p := cands[best]
			placed[p] = true
			out = append(out, ms.Order[p])
			for w, x := range mask(p) {
				union[w] |= x
			}
			cands = append(cands[:best], cands[best+1:]...)
		}
	}
	return out
}

// orderWork returns the (row, tap) products a masked GEMM computes with
// tiles of bm consecutive rows of order over the masks of ms: kmap's
// Tiles(bm).Work of the same masks in that order.
func orderWork(ms *kmap.Masked, order []int32, bm int) int64 {
	return (&kmap.Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Order: order}).Tiles(bm).Work
}

// regroupWindows is regroupTiles applied to each window of window rows of
// the Gray order on its own (the last window may be shorter): the rows of a
// window are regrouped among themselves, as one GPU block per window would
// do it. An experiment of `bench padding -regroup W -windows`.
func regroupWindows(ms *kmap.Masked, bm, window int) []int32 {
	out := make([]int32, 0, len(ms.Order))
	for s := 0; s < len(ms.Order); s += window {
		sub := &kmap.Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Order: ms.Order[s:min(s+window, len(ms.Order))]}
		out = append(out, regroupTiles(sub, bm, window)...)
	}
	return out
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
	n, W := len(ms.Order), ms.Words
	placed := make([]bool, n)
	order = make([]int32, 0, n)
	union := make([]uint64, W)
	cands := make([]int, 0, window)
	mask := func(pos int) []uint64 { r := int(ms.Order[pos]); return ms.Mask[r*W : r*W+W] }
	adds := func(pos int) int {
		a := 0
		for w, x := range mask(pos) {
			a += bits.OnesCount64(x &^ union[w])
		}
		return a
	}
	next := 0
	for len(order) < n {
		for placed[next] {
			next++
		}
		placed[next] = true
		order = append(order, ms.Order[next])
		copy(union, mask(next))
		cands = cands[:0]
		for p := next + 1; p < n && len(cands) < window; p++ {
			if !placed[p] {
				cands = append(cands, p)
			}
		}
		room := bm - 1
		for room > 0 && len(cands) > 0 {
			passes++
			best, bestAdd := -1, 0
			kept := cands[:0]
			for _, p := range cands {
				a := adds(p)
				switch {
				case a == 0 && room > 0:
					placed[p] = true
					order = append(order, ms.Order[p])
					room--
					continue
				case a > 0 && (best < 0 || a < bestAdd):
					best, bestAdd = len(kept), a
				}
				kept = append(kept, p)
			}
			cands = kept
			if room == 0 || best < 0 {
				continue
			}
			p := cands[best]
			placed[p] = true
			order = append(order, ms.Order[p])
			room--
			for w, x := range mask(p) {
				union[w] |= x
			}
			cands = append(cands[:best], cands[best+1:]...)
		}
	}
	return order, passes
}

// windowPasses returns the mean and the largest number of passes
// regroupByPasses makes over one window of window rows of the Gray order
// of ms (the last window may be shorter): what one GPU block per window
// would scan in sequence.
func windowPasses(ms *kmap.Masked, bm, window int) (mean float64, most int) {
	total, windows := 0, 0
	for s := 0; s < len(ms.Order); s += window {
		sub := &kmap.Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Order: ms.Order[s:min(s+window, len(ms.Order))]}
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
