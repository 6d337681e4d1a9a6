package kmap

import "math/bits"

// The Gray order puts rows of similar masks next to each other, but a
// masked GEMM tile of RegroupTileRows consecutive rows still multiplies
// the union of its rows' taps for every row. Regrouping the rows of each
// window of RegroupWindowRows rows of the Gray order into tiles greedily
// (RegroupWindow) shrinks those unions where they are large: on the
// benchmark's sphere shells the (row, tap) products at 128-row tiles fall
// by 6 % at RES 32 and 64, 4 % at RES 128 and 3 % at RES 256
// (`go run ./bench padding -res 32,64,128,256 -rows 128`;
// docs/PERF_NOTES.md, step 43). One GPU block per window computes the
// same order (cudaext, masks_regroup32/64): the order is part of a map's
// derived tables, so both engines follow the same rule (Regroups).
const (
	// RegroupTileRows is the tile height the regrouping aims at: that of
	// the H200's masked gathers below a million rows. Tiles of other
	// heights use the same order.
	RegroupTileRows = 128
	// RegroupWindowRows is the number of consecutive rows of the Gray
	// order regrouped among themselves (a multiple of RegroupTileRows, so
	// the tiles of every window start on a tile boundary).
	RegroupWindowRows = 1024
	// RegroupMinRows is the fewest rows of a table whose masked order is
	// regrouped: below two windows (RES 16's 848 rows) the tiles are few,
	// regrouping saved 0.5 % of their products and the greedy's passes
	// cost the map build more.
	RegroupMinRows = 2 * RegroupWindowRows
	// RegroupMaxRows is the most rows of a table whose masked order is
	// regrouped. Above it (RES 512's million rows) the Gray order's
	// padding is already small (1.05×) and the greedy would cost the map
	// build more than the tiles save.
	RegroupMaxRows = 1 << 19
)

// Regroups reports whether the masked order of a table of rows rows with
// masks of words 64-bit words is regrouped: single-word masks (V ≤ 64)
// of RegroupMinRows to RegroupMaxRows rows. Other tables keep the Gray
// order.
func Regroups(rows, words int) bool {
	return words == 1 && rows >= RegroupMinRows && rows <= RegroupMaxRows
}

// regroup returns the Gray order gray of the single-word masks mask
// regrouped window by window (RegroupWindow).
func regroup(mask []uint64, gray []int32) []int32 {
	out := make([]int32, len(gray))
	nw := (len(gray) + RegroupWindowRows - 1) / RegroupWindowRows
	parallelChunks(nw, func(w int) {
		lo, hi := w*RegroupWindowRows, min(len(gray), (w+1)*RegroupWindowRows)
		RegroupWindow(mask, gray[lo:hi], RegroupTileRows, out[lo:hi])
	})
	return out
}

// RegroupWindow writes to out (len(window) entries) the rows of window, a
// run of the Gray order, regrouped into tiles of tileRows rows by a
// greedy over their single-word masks (mask[r] is row r's): each tile
// starts with the first row of window not yet placed and grows, as long
// as it has room and rows remain, in passes over the remaining rows in
// window order. A pass first places every row whose taps are all in the
// tile's union (earliest first, while the tile has room), then, if there
// is still room, the earliest of the rows that add the fewest taps, whose
// taps join the union. Each tile's rows are written in window order. It
// returns the number of passes: the sequential steps of the GPU version
// (a block per window, one block-wide reduction per pass).
func RegroupWindow(mask []uint64, window []int32, tileRows int, out []int32) (passes int) {
	tileRows = max(tileRows, 1)
	n := len(window)
	tile := make([]int32, n)     // the tile of each position
	cands := make([]int32, 0, n) // positions still to place, ascending
	for p := range n {
		cands = append(cands, int32(p))
	}
	tiles := int32(0)
	for len(cands) > 0 {
		// Start a tile with the first remaining row.
		tile[cands[0]] = tiles
		union := mask[window[cands[0]]]
		cands = cands[1:]
		room := tileRows - 1
		for room > 0 && len(cands) > 0 {
			passes++
			best, bestAdd := -1, 0
			kept := cands[:0]
			for _, p := range cands {
				a := bits.OnesCount64(mask[window[p]] &^ union)
				if a == 0 && room > 0 {
					tile[p] = tiles
					room--
					continue
				}
				if a > 0 && (best < 0 || a < bestAdd) {
					best, bestAdd = len(kept), a
				}
				kept = append(kept, p)
			}
			cands = kept
			if room == 0 || best < 0 {
				continue
			}
			p := cands[best]
			tile[p] = tiles
			room--
			union |= mask[window[p]]
			cands = append(cands[:best], cands[best+1:]...)
		}
		tiles++
	}
	// Every tile but the last is full: tile t's rows go to t·tileRows …
	next := make([]int, tiles)
	for t := range next {
		next[t] = t * tileRows
	}
	for p, t := range tile {
		out[next[t]] = window[p]
		next[t]++
	}
	return passes
}
