package kmap

import "math/bits"

// The Gray order puts rows of similar masks next to each other, but a
// masked GEMM tile of RegroupTileRows consecutive rows still multiplies
// the union of its rows' taps for every row. Regrouping the rows of each
// window of RegroupWindowRows rows of the Gray order into tiles greedily
// (RegroupWindow) shrinks those unions where they are large: on the
// benchmark's sphere shells the (row, tap) products fall by 12 % at
// 128-row tiles and 9 % at 256-row tiles at RES 64, by 7 % and 6 % at RES
// 128 (`go run ./bench padding -res 64,128 -rows 128,256`;
// docs/PERF_NOTES.md, steps 43 and 44). One GPU block per window computes
// the same order (cudaext, masks_regroup32/64): the order is part of a
// map's derived tables, so both engines follow the same rule (Regroups).
const (
	// RegroupTileRows is the tile height the regrouping aims at: that of
	// the H200's masked gathers below a million rows. Tiles of other
	// heights use the same order.
	RegroupTileRows = 128
	// RegroupWindowRows is the number of consecutive rows of the Gray
	// order regrouped among themselves (a multiple of RegroupTileRows, so
	// the tiles of every window start on a tile boundary).
	RegroupWindowRows = 2048
	// RegroupMinRows is the fewest rows of a table whose masked order is
	// regrouped. H200, session 20, call 4 (fp16 steps, the regrouped
	// order against the Gray order in one binary): RES 64's 15,192 rows
	// gained 7.8 % in inference and 4.1 % in training, RES 32's 3,840 lost
	// 3.2 % and 0.8 %: its masked gathers fill about one wave of tiles,
	// whose length the largest unions set, so the greedy's 0.1 ms cost
	// more than the products saved.
	RegroupMinRows = 4 * RegroupWindowRows
	// RegroupMaxRows is the most rows of a table whose masked order is
	// regrouped. In the same runs RES 128's 64,160 rows gained 4.7 % and
	// 2.4 %, while RES 256's 252,392 neither gained nor lost (+0.3 %,
	// −0.1 %); since then the gathers have become tensor-bound, and in
	// session 43 (H200, calls 1 and 2, the regrouped order against the
	// Gray order in one binary through cudaext's EnvRegroupMaxRows, two
	// rounds each) regrouping RES 256's shell (128-row tile products
	// 1.16× → 1.11× the useful ones) cut the (256, 256, 2) forward gathers
	// 3.6 % (fp16), 3.5 % (tf32), 3 % (bf16) and the input gradients 4–5 %,
	// for about 0.04 ms more map build; RES 512's 1,026,536 rows (padding
	// 1.05× → 1.04× at 128-row tiles) gained 1 % in the gathers and lost
	// it in the map build (steps ±0.3 %). Hence 2^18: the bound sits
	// between them (docs/PERF_NOTES.md, step 94).
	RegroupMaxRows = 1 << 18
)

// Regroups reports whether the masked order of a table of rows rows with
// masks of words 64-bit words is regrouped: single-word masks (V ≤ 64)
// of RegroupMinRows to RegroupMaxRows rows. Other tables keep the Gray
// order.
func Regroups(rows, words int) bool {
	return RegroupsUpTo(rows, words, RegroupMaxRows)
}

// RegroupsUpTo is Regroups with maxRows in place of RegroupMaxRows: the
// GPU engine's experiment switch that regroups larger tables (cudaext's
// EnvRegroupMaxRows) moves that bound.
func RegroupsUpTo(rows, words, maxRows int) bool {
	return words == 1 && rows >= RegroupMinRows && rows <= maxRows
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
// greedy over their single-word masks (mask[r] is row r's). It works on
// the window's classes, the maximal runs of rows with equal masks (the
// Gray order puts equal masks next to each other), whose rows are placed
// earliest first. A tile starts with as many rows as fit of one class:
// the one with the most unplaced rows, or, for the second tile of each
// pair (odd tiles of the window, so that tiles twice as high share taps
// too), the one adding the fewest taps to the first's union; ties go to
// the one with the most unplaced rows, then the earliest. It grows, as
// long as it has room and rows remain, in passes: every class whose taps
// are all in the tile's union gives as many rows as fit, in window order;
// then, if there is still room, the class adding the fewest taps (on ties
// the one with the most unplaced rows, then the earliest) gives as many
// rows as fit, and its taps join the union. Each tile's rows are written
// in window order. It returns the number of passes: the sequential steps
// of the GPU version (a block per window, one reduction per pass).
func RegroupWindow(mask []uint64, window []int32, tileRows int, out []int32) (passes int) {
	tileRows = max(tileRows, 1)
	n := len(window)
	type class struct {
		mask        uint64
		front, rows int // the first unplaced position, the unplaced rows
	}
	var classes []class
	for p, r := range window {
		if p == 0 || mask[r] != mask[window[p-1]] {
			classes = append(classes, class{mask: mask[r], front: p})
		}
		classes[len(classes)-1].rows++
	}
	tile := make([]int32, n) // the tile of each position
	tiles := int32(0)
	room := 0
	take := func(c *class) {
		k := min(c.rows, room)
		for p := c.front; p < c.front+k; p++ {
			tile[p] = tiles
		}
		c.front += k
		c.rows -= k
		room -= k
	}
	// fewest returns the class with unplaced rows adding the fewest taps to
	// union (the most unplaced rows, then the earliest, on ties), or −1.
	fewest := func(union uint64) int {
		best, bestAdd := -1, 0
		for i, c := range classes {
			if c.rows == 0 {
				continue
			}
			a := bits.OnesCount64(c.mask &^ union)
			if best < 0 || a < bestAdd || (a == bestAdd && c.rows > classes[best].rows) {
				best, bestAdd = i, a
			}
		}
		return best
	}
	var union uint64 // the last tile's
	for left := n; left > 0; {
		// The first tile of a pair ranks the classes by rows alone (none
		// adds taps to a full union), the second by the taps they add to
		// the first's union.
		seed := union
		if tiles%2 == 0 {
			seed = ^uint64(0)
		}
		start := fewest(seed)
		room = tileRows
		union = classes[start].mask
		take(&classes[start])
		for room > 0 && left-(tileRows-room) > 0 {
			passes++
			for i := range classes {
				if c := &classes[i]; c.rows > 0 && c.mask&^union == 0 {
					take(c)
				}
			}
			if room == 0 {
				break
			}
			best := fewest(union)
			if best < 0 {
				break
			}
			union |= classes[best].mask
			take(&classes[best])
		}
		left -= tileRows - room
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
