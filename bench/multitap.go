package main

import "github.com/flexgemm-go/flexgemm/sparse/kmap"

// multiTapTraffic counts the dy rows a multi-tap weight-gradient GEMM over
// the row order order would read, for `bench padding -wgrad` (a design, no
// engine runs it yet; docs/PERF_NOTES.md, step 13). The order is cut into
// K slabs of rows consecutive rows; a block takes one slab and one group
// of `group` consecutive taps, loads the slab's dy rows once if any tap of
// the group is present in the slab, and gathers one x row per pair (absent
// neighbours are zero-filled, not read). It multiplies every row of the
// slab for each tap present in it: the masked tiles' products of slabs as
// tiles (kmap.Masked.Tiles(rows).Work). The pairs kernels load one dy row
// and one x row per pair, so a group of one tap loads as many dy rows as
// the slabs' products and only larger groups read less.
func multiTapTraffic(ms *kmap.Masked, order []int32, rows, group int) (dyRows int64) {
	union := make([]uint64, ms.Words)
	for s0 := 0; s0 < len(order); s0 += rows {
		s1 := min(s0+rows, len(order))
		clear(union)
		for _, r := range order[s0:s1] {
			for w := range ms.Words {
				union[w] |= ms.Mask[int(r)*ms.Words+w]
			}
		}
		n := int64(s1 - s0)
		for g0 := 0; g0 < ms.V; g0 += group {
			for v := g0; v < min(g0+group, ms.V); v++ {
				if union[v/64]>>(v%64)&1 != 0 {
					dyRows += n
					break
				}
			}
		}
	}
	return dyRows
}
