package kmap

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHybridByHand checks the hybrid split of four rows of three taps in
// tiles of two and four rows against splits worked out by hand.
func TestHybridByHand(t *testing.T) {
	// Row r holds the taps whose entries are not −1.
	table := []int32{
		0, -1, 5, // row 0: taps 0, 2
		1, 7, -1, // row 1: taps 0, 1
		2, -1, -1, // row 2: tap 0
		3, -1, 9, // row 3: taps 0, 2
	}
	ms := newMasked(table, 4, 3)
	ms.Order = []int32{0, 1, 2, 3}
	for _, tc := range []struct {
		name      string
		rows      int
		share     float64
		seg, taps []int32
		work      int64
		tapSeg    []int64
		sparse    []int32
	}{
		{"every tap dense", 2, 0, []int32{0, 3, 5}, []int32{0, 1, 2, 0, 2}, 10, []int64{0, 0, 0, 0}, []int32{}},
		{"half a tile: tap 1 of tile 0, taps of one row in tile 1 stay (1 of 2)", 2, 0.5, []int32{0, 3, 5}, []int32{0, 1, 2, 0, 2}, 10, []int64{0, 0, 0, 0}, []int32{}},
		{"over half a tile: single-row taps move", 2, 0.6, []int32{0, 1, 2}, []int32{0, 0}, 4, []int64{0, 0, 1, 3}, []int32{1, 0, 3}},
		{"one tile of four, taps under 3/4 move", 4, 0.75, []int32{0, 1}, []int32{0}, 4, []int64{0, 0, 1, 3}, []int32{1, 0, 3}},
		{"one tile of four, tap 2 (2 of 4) stays at a half", 4, 0.5, []int32{0, 2}, []int32{0, 2}, 8, []int64{0, 0, 1, 1}, []int32{1}},
		{"every tap sparse", 4, 1.01, []int32{0, 0}, []int32{}, 0, []int64{0, 4, 5, 7}, []int32{0, 1, 2, 3, 1, 0, 3}},
	} {
		h := ms.Hybrid(tc.rows, tc.share)
		require.Equal(t, tc.seg, h.Dense.Seg, tc.name)
		require.Equal(t, tc.taps, append([]int32{}, h.Dense.Taps...), tc.name)
		require.Equal(t, tc.work, h.Dense.Work, tc.name)
		require.Equal(t, tc.tapSeg, h.TapSeg, tc.name)
		require.Equal(t, tc.sparse, h.Sparse, tc.name)
	}
}

// TestHybridRandom checks the hybrid split of random tables against its
// definition, computed here from the table: every pair once, in its tile's
// dense taps or its tap's sparse list in tile and order position; dense
// taps held by at least the share of their tile's rows, sparse ones by
// fewer; with no share the masked gathers' Tiles.
func TestHybridRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(71, 1))
	for _, c := range []struct{ rows, V int }{{37, 3}, {200, 27}, {130, 70}} {
		table := make([]int32, c.rows*c.V)
		for i := range table {
			table[i] = -1
			if rng.Float64() < 0.4 {
				table[i] = int32(rng.IntN(1000))
			}
		}
		ms := newMasked(table, c.rows, c.V)
		pos := make([]int, c.rows) // position of each row in ms.Order
		for p, r := range ms.Order {
			pos[r] = p
		}
		for _, bm := range []int{1, 8, 64} {
			full := ms.Tiles(bm)
			for _, share := range []float64{0, 0.25, 0.5, 0.9, 1.5} {
				name := fmt.Sprintf("%d rows, V %d, tiles of %d, share %g", c.rows, c.V, bm, share)
				h := ms.Hybrid(bm, share)
				if share == 0 {
					require.Equal(t, full.Seg, h.Dense.Seg, name)
					require.Equal(t, full.Taps, h.Dense.Taps, name)
					require.Equal(t, full.Work, h.Dense.Work, name)
					require.Empty(t, h.Sparse, name)
				}
				require.Len(t, h.TapSeg, c.V+1, name)
				require.Len(t, h.Sparse, int(h.TapSeg[c.V]), name)
				var work int64
				want := make([][]int32, c.V) // the sparse rows of each tap, by position
				for t0 := 0; t0 < c.rows; t0 += bm {
					tile := t0 / bm
					rs := ms.Order[t0:min(c.rows, t0+bm)]
					count := make([]int, c.V)
					for _, r := range rs {
						for k := range c.V {
							if table[int(r)*c.V+k] >= 0 {
								count[k]++
							}
						}
					}
					dense := h.Dense.Taps[h.Dense.Seg[tile]:h.Dense.Seg[tile+1]]
					require.True(t, slices.IsSorted(dense), name)
					var wantDense []int32
					for k, n := range count {
						switch {
						case n == 0:
						case float64(n) >= share*float64(len(rs)):
							wantDense = append(wantDense, int32(k))
						default:
							for _, r := range rs {
								if table[int(r)*c.V+k] >= 0 {
									want[k] = append(want[k], r)
								}
							}
						}
					}
					require.Equal(t, wantDense, append([]int32(nil), dense...), "%s: tile %d", name, tile)
					work += int64(len(dense) * len(rs))
				}
				require.Equal(t, work, h.Dense.Work, name)
				for k := range c.V {
					got := h.Sparse[h.TapSeg[k]:h.TapSeg[k+1]]
					require.Equal(t, want[k], append([]int32(nil), got...), "%s: tap %d", name, k)
					require.True(t, slices.IsSortedFunc(got, func(a, b int32) int { return pos[a] - pos[b] }), name)
				}
				// The products: the masked ones left plus the moved pairs
				// are at most the masked gathers' and at least the pairs.
				var pairs int64
				for _, e := range table {
					if e >= 0 {
						pairs++
					}
				}
				require.LessOrEqual(t, h.Dense.Work+int64(len(h.Sparse)), full.Work, name)
				require.GreaterOrEqual(t, h.Dense.Work+int64(len(h.Sparse)), pairs, name)
			}
		}
	}
}
