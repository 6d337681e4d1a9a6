package cudaext

import "sort"

// The arithmetic of grouped per-tap gathers (pertap.go), free of the
// device so that the CPU tests check it.

// perTapMaxGroups is the most groups of a grouped per-tap gather
// (pertap.go): with groups of perTapGroupOuts results each, maps whose rows
// hold up to perTapGroupOuts·perTapMaxGroups taps on average (18 by
// default, of 27; a sphere shell's rows at RES 64 hold 12.6).
const perTapMaxGroups = 3

// perTapGroupsOf returns the groups of a per-tap gather of tiles tiles of
// tileBytes bytes of products each: 1 when all fit single (the limit of
// one buffer, 0: none), else the fewest groups of at most groupBytes
// each (0: no groups) if they are at most perTapMaxGroups, else 0 (the
// masked gather runs).
func perTapGroupsOf(tiles, tileBytes, single, groupBytes int64) int64 {
	if tiles*tileBytes <= single {
		return 1
	}
	per := groupBytes / tileBytes // tiles per group
	if per <= 0 {
		return 0
	}
	if g := (tiles + per - 1) / per; g <= perTapMaxGroups {
		return g
	}
	return 0
}

// tapOfTile returns the tap of tile t of per-tap slots whose tap k starts
// at tile firstTile[k] (V + 1 ascending entries, the last the tile count;
// t below it): the last tap whose first tile is at or before t, as taps
// without pairs have no tiles (their first tile is the next tap's).
func tapOfTile(firstTile []int64, t int64) int64 {
	return int64(sort.Search(len(firstTile), func(k int) bool { return firstTile[k] > t }) - 1)
}

// tapFirstTiles returns the first tile of each tap's segment of per-tap
// slots, each segment padded to whole tiles of bm slots: V + 1 entries for
// the pair counts of V taps, the last the tile count.
func tapFirstTiles(pairs []int64, bm int64) []int64 {
	first := make([]int64, len(pairs)+1)
	for k, n := range pairs {
		first[k+1] = first[k] + (n+bm-1)/bm
	}
	return first
}

// perTapLayout places the slot tables of a per-tap gather in one block of
// int32 words, each table on a 256-byte boundary as a block of its own
// would be: tbl [rows] at 0, slot [n·V] at slot, seg [tiles + 1] at seg,
// taps [tiles] at taps; words in all. tbl and slot are contiguous up to
// slot + n·V, the words that start at −1.
type perTapLayout struct{ slot, seg, taps, words int64 }

// perTapLayoutOf lays out the tables of rows slots, nV (row, tap) entries
// and tiles tiles.
func perTapLayoutOf(rows, nV, tiles int64) perTapLayout {
	align := func(x int64) int64 { return (x + 63) &^ 63 }
	l := perTapLayout{slot: align(rows)}
	l.seg = l.slot + align(nV)
	l.taps = l.seg + align(tiles+1)
	l.words = l.taps + tiles
	return l
}
