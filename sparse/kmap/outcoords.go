package kmap

import (
	"slices"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// reachedSites returns, sorted by (batch, x, y, z) and without repeats, the
// sites of out that some input row of ix (coordinates coords) reaches
// through a tap in direction dir: coarse outputs of fine inputs for a
// strided convolution (coarseFromFine), fine outputs of coarse inputs for a
// transposed one (fineFromCoarse).
//
// Inputs are visited in key order in blocks of grain rows; each block's
// candidates are sorted and deduplicated on their own (spatially close
// inputs share most outputs), and the per-block lists, concatenated in
// block order, are sorted and deduplicated once more.
func reachedSites(ix *sortedIndex, coords []int32, out grid.Extent, conv grid.Conv, dir direction) []int32 {
	n := len(ix.keys)
	nb := (n + grain - 1) / grain
	outBits := keyBits(out.Sites())
	X, Y, Z := uint64(out.X), uint64(out.Y), uint64(out.Z)
	size := out.Spatial()
	perBlock := make([][]uint64, nb)
	parallelChunks(nb, func(c int) {
		at := newAxisTaps(conv)
		var cand []uint64
		for j := c * grain; j < min(n, c*grain+grain); j++ {
			r := ix.row(j)
			p := coords[4*r : 4*r+4 : 4*r+4]
			for a := range 3 {
				axisTargets(&at[a], conv, dir, a, int(p[1+a]), size[a])
			}
			b := uint64(p[0])
			for i0 := range at[0].n {
				bx := (b*X + uint64(at[0].t[i0])) * Y
				for i1 := range at[1].n {
					by := (bx + uint64(at[1].t[i1])) * Z
					for i2 := range at[2].n {
						cand = append(cand, by+uint64(at[2].t[i2]))
					}
				}
			}
		}
		radixSort(cand, nil, outBits, false)
		perBlock[c] = slices.Clip(slices.Compact(cand))
	})
	total := 0
	for _, s := range perBlock {
		total += len(s)
	}
	keys := make([]uint64, 0, total)
	for c, s := range perBlock {
		keys = append(keys, s...)
		perBlock[c] = nil
	}
	radixSort(keys, nil, outBits, true)
	keys = slices.Compact(keys)
	oc := make([]int32, 4*len(keys))
	parallelRows(len(keys), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			b, x, y, z := out.Unkey(keys[j])
			oc[4*j], oc[4*j+1], oc[4*j+2], oc[4*j+3] = int32(b), int32(x), int32(y), int32(z)
		}
	})
	return oc
}
