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
	V := m.V()
	seen := make([]int32, m.NIn) // tile number + 1 of the last tile that read the row
	var rows int64
	for t0 := 0; t0 < len(order); t0 += bm {
		stamp := int32(t0/bm + 1)
		for _, o := range order[t0:min(len(order), t0+bm)] {
			for _, i := range m.Nbr[int(o)*V : int(o)*V+V] {
				if i >= 0 && seen[i] != stamp {
					seen[i] = stamp
					rows++
				}
			}
		}
	}
	return rows
}

// zOrder returns the output rows of m sorted by the z-order code of their
// coordinates: tiles of consecutive rows of it are compact pieces of space.
func zOrder(m *kmap.Map) ([]int32, error) {
	codes := make([]uint64, m.NOut)
	if err := serialize.Encode(serialize.ZOrder, m.OutCoords, m.Out, codes); err != nil {
		return nil, err
	}
	return serialize.Argsort(codes)
}
