package main

import (
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// halfBalance models a gather design for small channel counts (a design of
// docs/PERF_NOTES.md, thirty-third session, not built): the two blocks of a
// cluster keep the weights of half the taps each resident in shared memory
// (the taps before the centre in one, those after it in the other) and
// multiply the same tile, each over its half of the tile's tap union. The
// taps in flexible (the centre, say) are resident in both blocks: each of
// them present in the union goes, in the list's order, to the half with
// fewer taps so far (the first half on a tie). The pair finishes a tile
// when its busier half does, so of the 2·max(half) tap iterations the pair
// spends on a tile, |union| do work. halfBalance returns Σ|union| /
// Σ 2·max(half) over the tiles of a map with V taps (1: the halves always
// balance; at least ½), or 1 for no tiles.
func halfBalance(tiles *kmap.Tiles, V int, flexible []int32) float64 {
	centre := int32(V / 2)
	var work, spent int64
	var flex []int32
	for t := range len(tiles.Seg) - 1 {
		var lo, hi int64
		flex = flex[:0]
		for _, v := range tiles.Taps[tiles.Seg[t]:tiles.Seg[t+1]] {
			switch {
			case slices.Contains(flexible, v):
				flex = append(flex, v)
			case v < centre:
				lo++
			default:
				hi++
			}
		}
		// In the list's order, not the union's.
		for _, v := range flexible {
			if !slices.Contains(flex, v) {
				continue
			}
			if lo <= hi {
				lo++
			} else {
				hi++
			}
		}
		work += lo + hi
		spent += 2 * max(lo, hi)
	}
	if spent == 0 {
		return 1
	}
	return float64(work) / float64(spent)
}
