package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/serialize"
)

// handMap is a map of four output rows over five input rows through two
// taps (-1 = no neighbour): seven pairs, row 2 has tap 0 only.
func handMap() *kmap.Map {
	m := &kmap.Map{NIn: 5, NOut: 4, Nbr: []int32{
		0, 1,
		1, 2,
		3, -1,
		3, 4,
	}}
	m.Conv.Kernel = [3]int{2, 1, 1} // V = 2
	return m
}

func TestTileHaloRows(t *testing.T) {
	m := handMap()
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
	// The most distinct rows of one tile.
	for _, tc := range []struct {
		order []int32
		bm    int
		most  int
	}{
		{[]int32{0, 1, 2, 3}, 1, 2},
		{[]int32{0, 1, 2, 3}, 2, 3}, // {0, 1, 2}
		{[]int32{0, 2, 1, 3}, 2, 4}, // {1, 2, 3, 4}
		{[]int32{0, 1, 2, 3}, 4, 5},
		{nil, 2, 0},
	} {
		sum, most := tileHaloStats(m, tc.order, tc.bm)
		require.Equal(t, tileHaloRows(m, tc.order, tc.bm), sum)
		require.Equal(t, tc.most, most, "order %v, %d rows", tc.order, tc.bm)
	}
}

// TestGatherBytes checks the gather traffic model on a hand-made map and
// its relations on a shell.
func TestGatherBytes(t *testing.T) {
	m := handMap()
	order := []int32{0, 1, 2, 3}
	for _, tc := range []struct {
		bm, c       int
		once        bool
		rows, wts   int64
		description string
	}{
		// Tiles {0, 1} and {2, 3} visit both taps: 4 visits of a 64×64
		// fp16 slice; one column tile of 64.
		{2, 64, false, 7 * 64 * 2, 4 * 64 * 64 * 2, "a row per pair"},
		{2, 64, true, 5 * 64 * 2, 4 * 64 * 64 * 2, "distinct rows once: {0, 1, 2}, {3, 4}"},
		// 512 channels: two column tiles of 256 re-read the rows.
		{2, 512, false, 7 * 512 * 2 * 2, 4 * 512 * 512 * 2, "two column tiles"},
		// Tiles of one row: row 2 has one tap.
		{1, 64, false, 7 * 64 * 2, 7 * 64 * 64 * 2, "one-row tiles"},
	} {
		rowsRead := m.Stats(0).Pairs
		if tc.once {
			rowsRead = tileHaloRows(m, order, tc.bm)
		}
		r, w := gatherBytes(rowsRead, orderTiles(m.Masked(), order, tc.bm), tc.c, 2)
		require.Equal(t, tc.rows, r, tc.description)
		require.Equal(t, tc.wts, w, tc.description)
	}

	shell := mustShellMap(t, 32)
	z, err := zOrder(shell)
	require.NoError(t, err)
	st := shell.Stats(0)
	gr, gw := gatherBytes(st.Pairs, shell.Masked().Tiles(128), 64, 2)
	require.Equal(t, st.Pairs*64*2, gr)
	require.Equal(t, shell.Stats(128).Padding*float64(st.Pairs)*64*64*2, float64(gw)*128, "weights: one slice per tap of each 128-row union")
	zr, zw := gatherBytes(tileHaloRows(shell, z, 128), orderTiles(shell.Masked(), z, 128), 64, 2)
	require.Less(t, zr, gr, "z-order tiles read fewer rows once")
	require.Greater(t, zw, gw, "but visit more taps")
}

// TestCurveOrders checks that both curve orders are permutations of the
// output rows whose tiles read fewer distinct rows than the Gray order's.
func TestCurveOrders(t *testing.T) {
	m := mustShellMap(t, 24)
	gray := tileHaloRows(m, m.Masked().Order, 256)
	for _, mode := range []serialize.Mode{serialize.ZOrder, serialize.Hilbert} {
		o, err := curveOrder(m, mode)
		require.NoError(t, err)
		seen := make([]bool, m.NOut)
		for _, r := range o {
			require.False(t, seen[r], "%v: row %d twice", mode, r)
			seen[r] = true
		}
		require.Len(t, o, m.NOut)
		require.Less(t, tileHaloRows(m, o, 256), gray, "%v", mode)
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
