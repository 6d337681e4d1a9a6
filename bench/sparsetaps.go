package main

import (
	"math/bits"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// sparseTapSplit measures a hybrid gather for `bench padding -sparsetaps`:
// in tiles of bm consecutive entries of order, a tap of the tile's union
// that fewer than frac of the tile's rows hold leaves the masked tile and
// its pairs go to per-tap slots (one GEMM per tap over its own rows, as
// the per-tap gathers do). It returns the masked tiles' products today
// (work: Σ over tiles of |union| · rows), the padding those sparse taps
// account for (rows of the tile without them) and the pairs they carry
// (moved): after the split the masked tiles multiply work − padding −
// moved products and the slots moved more.
func sparseTapSplit(ms *kmap.Masked, order []int32, bm int, frac float64) (work, padding, moved int64) {
	W := ms.Words
	count := make([]int64, ms.V)
	for t0 := 0; t0 < len(order); t0 += bm {
		rows := order[t0:min(len(order), t0+bm)]
		clear(count)
		for _, r := range rows {
			for w, x := range ms.Mask[int(r)*W : int(r)*W+W] {
				for x != 0 {
					count[w*64+bits.TrailingZeros64(x)]++
					x &= x - 1
				}
			}
		}
		n := int64(len(rows))
		for _, c := range count {
			if c == 0 {
				continue
			}
			work += n
			if float64(c) < frac*float64(n) {
				padding += n - c
				moved += c
			}
		}
	}
	return work, padding, moved
}
