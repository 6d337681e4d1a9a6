package main

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

// mustShellMap is shellMap for tests.
func mustShellMap(t testing.TB, res int) *kmap.Map {
	t.Helper()
	m, err := shellMap(res)
	require.NoError(t, err)
	return m
}

func TestRegroupTilesByHand(t *testing.T) {
	// Rows alternate between two taps: the order as given puts one of
	// each in every 2-row tile (2 taps per tile); regrouping pairs equal
	// rows (1 tap per tile).
	ms := &kmap.Masked{V: 2, Words: 1, Mask: []uint64{0b01, 0b10, 0b01, 0b10}, Order: []int32{0, 1, 2, 3}}
	require.Equal(t, int64(8), orderWork(ms, ms.Order, 2))
	got := regroupTiles(ms, 2, 4)
	require.Equal(t, []int32{0, 2, 1, 3}, got)
	require.Equal(t, int64(4), orderWork(ms, got, 2))
	// A window of one row cannot look past the next row: the order stays.
	require.Equal(t, ms.Order, regroupTiles(ms, 2, 1))
}

func TestRegroupTilesSphere(t *testing.T) {
	for _, res := range []int{16, 32} {
		ms := mustShellMap(t, res).Masked()
		for _, bm := range []int{64, 128} {
			require.Equal(t, ms.Tiles(bm).Work, orderWork(ms, ms.Order, bm), "RES %d BM %d", res, bm)
			got := regroupTiles(ms, bm, 1024)
			// A permutation of the rows …
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			want := slices.Clone(ms.Order)
			slices.Sort(want)
			require.Equal(t, want, sorted, "RES %d BM %d", res, bm)
			// … that on these shells needs no more products than the Gray order.
			require.LessOrEqual(t, orderWork(ms, got, bm), ms.Tiles(bm).Work, "RES %d BM %d", res, bm)
		}
	}
}

func TestRegroupWindows(t *testing.T) {
	ms := mustShellMap(t, 32).Masked()
	n := len(ms.Order)
	// One window holding every row is the sliding greedy over that window.
	require.Equal(t, regroupTiles(ms, 128, n), regroupWindows(ms, 128, n))
	for _, w := range []int{256, 1000, 2048} {
		got := regroupWindows(ms, 128, w)
		require.Len(t, got, n)
		// Every window keeps its own rows, regrouped among themselves.
		for s := 0; s < n; s += w {
			e := min(s+w, n)
			want := slices.Clone(ms.Order[s:e])
			have := slices.Clone(got[s:e])
			slices.Sort(want)
			slices.Sort(have)
			require.Equal(t, want, have, "window %d at %d", w, s)
		}
	}
}

// TestRegroupByPasses checks that the pass formulation of the greedy (the
// GPU design) picks exactly the rows regroupTiles picks, sliding and in
// windows, and counts at least one pass per regrouped tile.
func TestRegroupByPasses(t *testing.T) {
	ms := &kmap.Masked{V: 2, Words: 1, Mask: []uint64{0b01, 0b10, 0b01, 0b10}, Order: []int32{0, 1, 2, 3}}
	got, passes := regroupByPasses(ms, 2, 4)
	require.Equal(t, regroupTiles(ms, 2, 4), got)
	require.Equal(t, 2, passes)
	for _, res := range []int{16, 32} {
		ms := mustShellMap(t, res).Masked()
		for _, bm := range []int{64, 128} {
			for _, w := range []int{1, 256, 1024} {
				got, passes := regroupByPasses(ms, bm, w)
				require.Equal(t, regroupTiles(ms, bm, w), got, "RES %d BM %d window %d", res, bm, w)
				require.GreaterOrEqual(t, passes, (len(ms.Order)+bm-1)/bm-1, "RES %d BM %d window %d", res, bm, w)
			}
		}
	}
}
