package main

import (
	"cmp"
	"math/bits"
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// brickWindowLocality models the windows of the GPU brick search
// (cudaext's kmap_nbr_brick: warp w of W resident warps takes bricks w,
// w + W, …, so at any moment the warps hold about W consecutive bricks) for
// the rows coords ([N, 4]: batch, x, y, z), in 4×4×4-cell bricks numbered
// in claim order (by each brick's first row, as kmap_brick_insert numbers
// them, up to the order of a block's warps) or, with curve, along the
// z-order of the bricks' coordinates. For disjoint windows of window
// consecutive bricks it returns the share of the bricks' present
// neighbours (26 around each) that lie outside the brick's window, and the
// share of the 32-byte sectors of the neighbour table (27 int32 entries,
// 108 bytes, per row) written by a window's rows that the window writes
// only in part (the rest by rows of other windows, at other times).
// Session 39 (docs/PERF_NOTES.md, step 88) used it to read a measurement:
// the search runs 2.2× slower when its warps work on spread-out bricks.
func brickWindowLocality(coords []int32, window int, curve bool) (outside, partial float64) {
	type brick struct {
		key  [4]int32
		rows []int32
	}
	at := map[[4]int32]int{}
	var bricks []*brick
	most := int32(0)
	for r := range len(coords) / 4 {
		c := coords[4*r : 4*r+4]
		k := [4]int32{c[0], c[1] >> 2, c[2] >> 2, c[3] >> 2}
		i, ok := at[k]
		if !ok {
			i = len(bricks)
			at[k] = i
			bricks = append(bricks, &brick{key: k})
			most = max(most, k[1], k[2], k[3])
		}
		bricks[i].rows = append(bricks[i].rows, int32(r))
	}
	if curve {
		axisBits := max(1, bits.Len32(uint32(most)))
		code := func(b *brick) uint64 {
			return serialize.EncodePoint(serialize.ZOrder, axisBits, uint32(b.key[0]), uint32(b.key[1]), uint32(b.key[2]), uint32(b.key[3]))
		}
		slices.SortStableFunc(bricks, func(a, b *brick) int { return cmp.Compare(code(a), code(b)) })
	}
	pos := make(map[[4]int32]int, len(bricks))
	for i, b := range bricks {
		pos[b.key] = i
	}
	const rowBytes, sector = 27 * 4, 32
	var nbrs, away, sectors, parts int64
	for w0 := 0; w0 < len(bricks); w0 += window {
		w1 := min(w0+window, len(bricks))
		covered := map[int64]int64{} // sector → bytes the window writes in it
		for _, b := range bricks[w0:w1] {
			for _, r := range b.rows {
				lo, hi := int64(r)*rowBytes, int64(r+1)*rowBytes
				for s := lo / sector; s*sector < hi; s++ {
					covered[s] += min(hi, (s+1)*sector) - max(lo, s*sector)
				}
			}
			for d := range 27 {
				if d == 13 {
					continue // the brick itself
				}
				k := b.key
				k[1], k[2], k[3] = k[1]+int32(d/9-1), k[2]+int32(d/3%3-1), k[3]+int32(d%3-1)
				if p, ok := pos[k]; ok {
					nbrs++
					if p < w0 || p >= w1 {
						away++
					}
				}
			}
		}
		for _, n := range covered {
			sectors++
			if n < sector {
				parts++
			}
		}
	}
	if nbrs > 0 {
		outside = float64(away) / float64(nbrs)
	}
	if sectors > 0 {
		partial = float64(parts) / float64(sectors)
	}
	return outside, partial
}
