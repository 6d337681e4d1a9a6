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
	perBlock := make([][]uint64, nb)
	ps := plans(conv, dir, ix.ext, out)
	// Fine sites of a transposed convolution never repeat when no axis
	// has overlapping windows, (K−1)·D < S: each axis then tells the
	// inputs apart. The per-block deduplication can be skipped.
	distinct := dir == fineFromCoarse
	for a := range 3 {
		distinct = distinct && (conv.Kernel[a]-1)*conv.Dilation[a] < conv.Stride[a]
	}
	parallelChunks(nb, func(c int) {
		ks, ts := scratch(conv)
		var cand []uint64
		for j := c * grain; j < min(n, c*grain+grain); j++ {
			r := ix.row(j)
			p := coords[4*r : 4*r+4 : 4*r+4]
			_, tx := ps[0].taps(int(p[1]), ks[0], ts[0])
			_, ty := ps[1].taps(int(p[2]), ks[1], ts[1])
			_, tz := ps[2].taps(int(p[3]), ks[2], ts[2])
			b := uint64(p[0])
			for _, t0 := range tx {
				bx := (b*X + uint64(t0)) * Y
				for _, t1 := range ty {
					by := (bx + uint64(t1)) * Z
					for _, t2 := range tz {
						cand = append(cand, by+uint64(t2))
					}
				}
			}
		}
		if !distinct {
			radixSort(cand, nil, outBits, false)
			cand = slices.Compact(cand)
		}
		perBlock[c] = slices.Clip(cand)
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
		// Keys ascend, so consecutive outputs usually share (b, x, y):
		// divide only when the row of z values changes.
		var b, x, y int
		base, next := uint64(0), uint64(0)
		for j := lo; j < hi; j++ {
			k := keys[j]
			if j == lo || k >= next {
				row := k / Z
				base, next = row*Z, row*Z+Z
				y = int(row % Y)
				row /= Y
				x, b = int(row%X), int(row/X)
			}
			oc[4*j], oc[4*j+1], oc[4*j+2], oc[4*j+3] = int32(b), int32(x), int32(y), int32(k-base)
		}
	})
	return oc
}
