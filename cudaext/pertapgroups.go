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
