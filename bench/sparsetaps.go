package main

import "github.com/flexgemm-go/flexgemm/sparse/kmap"

// sparseTapSplit measures a hybrid gather for `bench padding -sparsetaps`:
// in tiles of bm consecutive entries of ms.Order, a tap of the tile's
// union that fewer than frac of the tile's rows hold leaves the masked
// tile and its pairs go to per-tap slots (kmap.Masked.Hybrid). It returns
// the masked tiles' products today (work: Σ over tiles of |union| · rows),
// the padding those sparse taps account for (rows of the tile without
// them) and the pairs they carry (moved): after the split the masked tiles
// multiply work − padding − moved products and the slots moved more.
func sparseTapSplit(ms *kmap.Masked, bm int, frac float64) (work, padding, moved int64) {
	h := ms.Hybrid(bm, frac)
	work = ms.Tiles(bm).Work
	moved = int64(len(h.Sparse))
	return work, work - h.Dense.Work - moved, moved
}
