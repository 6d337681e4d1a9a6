package main

import "github.com/flexgemm-go/flexgemm/sparse/kmap"

// The model of step 76 of docs/PERF_NOTES.md (thirty-fourth session,
// refuted on the H200): Gray orders sorted within windows of consecutive
// input rows, so that the tiles a gather runs at once read rows that lie
// near each other and stay in the L2 between the tiles that read them.
// `bench padding -graywindows W,…` reports, per window, the padding of the
// windowed order and the rows this model reads from DRAM.

// grayInWindows returns ms's Gray order with each window of w consecutive
// input rows sorted on its own: the rows of window 0 (rows [0, w)) in Gray
// order, then those of window 1, and so on (stable: ms.Gray's order within
// a window). w ≥ the rows, or w ≤ 0, gives ms.Gray itself (a copy).
func grayInWindows(ms *kmap.Masked, w int) []int32 {
	n := len(ms.Gray)
	if w <= 0 || w >= n {
		return append([]int32(nil), ms.Gray...)
	}
	windows := (n + w - 1) / w
	start := make([]int, windows+1)
	for _, r := range ms.Gray {
		start[int(r)/w+1]++
	}
	for i := range windows {
		start[i+1] += start[i]
	}
	order := make([]int32, n)
	for _, r := range ms.Gray {
		k := int(r) / w
		order[start[k]] = r
		start[k]++
	}
	return order
}

// dramRowReads models the input rows a gather over the tiles of bm
// consecutive rows of order reads from DRAM: the tiles run in waves of
// waveTiles (the blocks resident at once), a wave reads each distinct input
// row it needs once, and a row read by an earlier wave is still in a cache
// of cacheRows rows unless the waves since then read more than cacheRows
// distinct rows in all (a least-recently-used cache, counted per wave:
// rows read by several of those waves are counted once per wave, so the
// model errs towards misses). nbr is the map's [rows, V] neighbour table
// (−1 for none).
func dramRowReads(nbr []int32, V int, order []int32, bm, waveTiles, cacheRows int) int64 {
	last := make(map[int32]int, len(order))
	prefix := []int{0} // distinct rows read by waves before wave i
	wave := bm * waveTiles
	var misses int64
	for lo, w := 0, 0; lo < len(order); lo, w = lo+wave, w+1 {
		distinct := 0
		for _, r := range order[lo:min(lo+wave, len(order))] {
			for _, s := range nbr[int(r)*V : int(r)*V+V] {
				if s < 0 {
					continue
				}
				lw, seen := last[s]
				if seen && lw == w {
					continue
				}
				if !seen || prefix[w]-prefix[lw+1] > cacheRows {
					misses++
				}
				last[s] = w
				distinct++
			}
		}
		prefix = append(prefix, prefix[w]+distinct)
	}
	return misses
}
