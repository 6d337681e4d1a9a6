package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSparseTapSplit checks the hybrid split's products on the hand-made
// map (rows 0, 1, 3 hold taps 0 and 1, row 2 tap 0 only) in orders given
// here and its invariants on a shell.
func TestSparseTapSplit(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		order                []int32
		bm                   int
		frac                 float64
		work, padding, moved int64
	}{
		{"one tile, no tap under a quarter", []int32{0, 1, 2, 3}, 4, 0.25, 8, 0, 0},
		{"one tile, tap 1 under 4/5 (3 of 4 rows)", []int32{0, 1, 2, 3}, 4, 0.8, 8, 1, 3},
		{"one tile, every tap under 1.01: every pair moved", []int32{0, 1, 2, 3}, 4, 1.01, 8, 1, 7},
		{"tiles of two: {0, 1} full, {2, 3} tap 1 in one row", []int32{0, 1, 2, 3}, 2, 0.75, 8, 1, 1},
		{"tiles of two, a half is not under a half", []int32{0, 1, 2, 3}, 2, 0.5, 8, 0, 0},
		{"rows alone have no padding", []int32{0, 1, 2, 3}, 1, 1.01, 7, 0, 7},
		{"no rows", nil, 4, 0.5, 0, 0, 0},
	} {
		ms := handMap().Masked()
		ms.Order = tc.order
		work, padding, moved := sparseTapSplit(ms, tc.bm, tc.frac)
		require.Equal(t, [3]int64{tc.work, tc.padding, tc.moved}, [3]int64{work, padding, moved}, tc.name)
	}
	// On a shell: the work is the map's masked work, the moved padding at
	// most all of it, and a threshold above every count moves every pair.
	shell, err := shellMap(32)
	require.NoError(t, err)
	sm := shell.Masked()
	pairs := shell.Stats(0).Pairs
	work, padding, moved := sparseTapSplit(sm, 128, 0.5)
	require.Equal(t, sm.Tiles(128).Work, work)
	require.LessOrEqual(t, padding, work-pairs)
	require.Less(t, moved, pairs)
	work, padding, moved = sparseTapSplit(sm, 128, 1.01)
	require.Equal(t, pairs, moved)
	require.Equal(t, work-pairs, padding)
}
