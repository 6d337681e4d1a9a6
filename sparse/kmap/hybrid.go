package kmap

import "math/bits"

// HybridTiles splits the tiles of a masked order for a hybrid gather: a
// tap of a tile's union that at least MinShare of the tile's rows hold
// stays in the masked tile (Dense), and the pairs of the other taps (the
// sparse ones, which cause most of the masked padding while carrying few
// pairs) go to per-tap lists (Sparse), to be multiplied one GEMM per tap
// over their own rows. Every (row, tap) pair of the map is in exactly one
// of the two: in its tile's dense taps or in its tap's sparse list.
type HybridTiles struct {
	Rows     int     // tile height: tile t covers Order[t·Rows : (t+1)·Rows]
	MinShare float64 // the share of a tile's rows a dense tap has at least
	// Dense are the tiles' dense taps (Seg, Taps, ascending) and the
	// masked products they make (Work).
	Dense *Tiles
	// Sparse lists the output rows of the sparse pairs by tap: tap k's are
	// Sparse[TapSeg[k]:TapSeg[k+1]], in the order of the tiles and, within
	// a tile, of Order (so the lists do not depend on how they are built).
	TapSeg []int64
	Sparse []int32
}

// Hybrid returns the hybrid split of the tiles of rows consecutive entries
// of ms.Order (rows ≤ 0 is taken as 1) with dense taps held by at least
// minShare of a tile's rows (minShare ≤ 0: every tap dense, the Tiles of
// the masked gathers; above 1: every tap sparse). Not cached.
func (ms *Masked) Hybrid(rows int, minShare float64) *HybridTiles {
	rows = max(rows, 1)
	n, V, W := len(ms.Order), ms.V, ms.Words
	nt := (n + rows - 1) / rows
	h := &HybridTiles{Rows: rows, MinShare: minShare, Dense: &Tiles{Rows: rows, Seg: make([]int32, nt+1)},
		TapSeg: make([]int64, V+1)}
	count := make([]int, V)
	// sparse holds each tile's sparse taps (W words a tile) for the
	// second pass.
	sparse := make([]uint64, nt*W)
	// First pass: each tile's tap counts, its dense taps, and the sparse
	// pairs of each tap.
	for t := range nt {
		clear(count)
		rs := ms.Order[t*rows : min(n, t*rows+rows)]
		for _, r := range rs {
			for w, x := range ms.Mask[int(r)*W : int(r)*W+W] {
				for x != 0 {
					count[w*64+bits.TrailingZeros64(x)]++
					x &= x - 1
				}
			}
		}
		dense := int32(0)
		for k, c := range count {
			switch {
			case c == 0:
			case float64(c) < minShare*float64(len(rs)):
				sparse[t*W+k/64] |= 1 << (k % 64)
				h.TapSeg[k+1] += int64(c)
			default:
				h.Dense.Taps = append(h.Dense.Taps, int32(k))
				dense++
			}
		}
		h.Dense.Seg[t+1] = h.Dense.Seg[t] + dense
		h.Dense.Work += int64(dense) * int64(len(rs))
	}
	for k := range V {
		h.TapSeg[k+1] += h.TapSeg[k]
	}
	// Second pass: the sparse pairs' rows, tile by tile.
	h.Sparse = make([]int32, h.TapSeg[V])
	next := append([]int64(nil), h.TapSeg[:V]...)
	for t := range nt {
		sw := sparse[t*W : t*W+W]
		for _, r := range ms.Order[t*rows : min(n, t*rows+rows)] {
			for w, x := range ms.Mask[int(r)*W : int(r)*W+W] {
				for x &= sw[w]; x != 0; x &= x - 1 {
					k := w*64 + bits.TrailingZeros64(x)
					h.Sparse[next[k]] = r
					next[k]++
				}
			}
		}
	}
	return h
}
