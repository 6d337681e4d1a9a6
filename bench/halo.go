package main

import (
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// tileHaloRows returns Σ over the tiles of bm consecutive entries of order
// of the number of distinct input rows that the tile's output rows have as
// neighbours in m's table: the rows a gather GEMM would read if it loaded
// each tile's neighbourhood once and multiplied every tap from there,
// where today's gathers read one input row per pair. An experiment of
// `bench padding -halo`.
func tileHaloRows(m *kmap.Map, order []int32, bm int) int64 {
	sum, _ := tileHaloStats(m, order, bm)
	return sum
}

// tileHaloStats returns tileHaloRows and the most distinct input rows of
// any one tile (what its shared memory would have to hold).
func tileHaloStats(m *kmap.Map, order []int32, bm int) (sum int64, most int) {
	V := m.V()
	seen := make([]int32, m.NIn) // tile number + 1 of the last tile that read the row
	for t0 := 0; t0 < len(order); t0 += bm {
		stamp, n := int32(t0/bm+1), 0
		for _, o := range order[t0:min(len(order), t0+bm)] {
			for _, i := range m.Nbr[int(o)*V : int(o)*V+V] {
				if i >= 0 && seen[i] != stamp {
					seen[i] = stamp
					n++
				}
			}
		}
		sum += int64(n)
		most = max(most, n)
	}
	return sum, most
}

// gatherBytes models the bytes a masked forward gather of a c → c layer
// reads from L2 with the row tiles whose tap unions are tiles, in elements
// of esz bytes: every tile reads, for each of its ⌈c/bn⌉ column tiles, the
// input rows it gathers (rowsRead over all tiles, c·esz bytes each) and,
// for each tap of its union, its columns' weight slice (c·bn·esz), bn the
// column tile the engine's heuristic takes for c columns (256, 128 or
// 64). rowsRead is one row per pair for today's gathers, or the tiles'
// distinct input rows (tileHaloRows) for a gather that stages its
// neighbourhood once. Nsight Compute measured 10.6 GB for the first
// gather of a RES 1024 C 64 step (this model: 10.2) and 5.4 GB at RES 256
// C 256 (model: 5.4; session 16, call 3). An experiment of
// `bench padding -bytes`.
func gatherBytes(rowsRead int64, tiles *kmap.Tiles, c, esz int) (rows, weights int64) {
	bn := 64
	switch {
	case c >= 256:
		bn = 256
	case c >= 128:
		bn = 128
	}
	colTiles := int64((c + bn - 1) / bn)
	return rowsRead * int64(c*esz) * colTiles, int64(len(tiles.Taps)) * int64(c*c*esz)
}

// zOrder returns the output rows of m sorted by the z-order code of their
// coordinates: tiles of consecutive rows of it are compact pieces of space.
func zOrder(m *kmap.Map) ([]int32, error) { return curveOrder(m, serialize.ZOrder) }

// curveOrder returns the output rows of m sorted by the code of their
// coordinates on the space-filling curve mode.
func curveOrder(m *kmap.Map, mode serialize.Mode) ([]int32, error) {
	codes := make([]uint64, m.NOut)
	if err := serialize.Encode(mode, m.OutCoords, m.Out, codes); err != nil {
		return nil, err
	}
	return serialize.Argsort(codes)
}
