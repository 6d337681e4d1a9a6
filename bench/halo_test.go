package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

func TestTileHaloRows(t *testing.T) {
	// Four output rows over five input rows, two taps; -1 = no neighbour.
	m := &kmap.Map{NIn: 5, NOut: 4, Nbr: []int32{
		0, 1,
		1, 2,
		3, -1,
		3, 4,
	}}
	m.Conv.Kernel = [3]int{2, 1, 1} // V = 2
	for _, tc := range []struct {
		order []int32
		bm    int
		want  int64
	}{
		{[]int32{0, 1, 2, 3}, 1, 7}, // every pair on its own
		{[]int32{0, 1, 2, 3}, 2, 5}, // {0, 1, 2} and {3, 4}
		{[]int32{0, 2, 1, 3}, 2, 7}, // {0, 1, 3} and {1, 2, 3, 4}
		{[]int32{0, 1, 2, 3}, 4, 5}, // one tile: every input row once
		{[]int32{3, 2, 1, 0}, 3, 6}, // {3, 4, 1, 2} and {0, 1}
		{nil, 2, 0},
	} {
		require.Equal(t, tc.want, tileHaloRows(m, tc.order, tc.bm), "order %v, %d rows", tc.order, tc.bm)
	}
}

func TestZOrderTilesOfTheShell(t *testing.T) {
	m := mustShellMap(t, 32)
	z, err := zOrder(m)
	require.NoError(t, err)
	require.Len(t, z, m.NOut)
	// Compact tiles share their neighbours: fewer distinct rows than in the
	// Gray order's tiles, which are never more than the pairs.
	st := m.Stats(0)
	gray := tileHaloRows(m, m.Masked().Order, 128)
	require.LessOrEqual(t, gray, st.Pairs)
	require.Less(t, tileHaloRows(m, z, 128), gray)
}
