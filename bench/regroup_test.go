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
		gray := withOrder(ms, ms.Gray)
		for _, bm := range []int{64, 128} {
			require.Equal(t, gray.Tiles(bm).Work, orderWork(ms, ms.Gray, bm), "RES %d BM %d", res, bm)
			got := regroupTiles(gray, bm, 1024)
			// A permutation of the rows …
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			want := slices.Clone(ms.Gray)
			slices.Sort(want)
			require.Equal(t, want, sorted, "RES %d BM %d", res, bm)
			// … that on these shells needs no more products than the Gray order.
			require.LessOrEqual(t, orderWork(ms, got, bm), gray.Tiles(bm).Work, "RES %d BM %d", res, bm)
		}
	}
}

// TestRegroupWindows checks the windowed greedy (kmap.RegroupWindow, the
// engines' rule): by hand, its passes as the GPU would count them; on the
// shells, each window's tiles are a permutation of the window's rows
// needing no more products than the Gray order's (windows of whole
// tiles), and the engines' order
// is the greedy at kmap's window and tile height.
func TestRegroupWindows(t *testing.T) {
	ms := &kmap.Masked{V: 2, Words: 1, Mask: []uint64{0b01, 0b10, 0b01, 0b10}, Gray: []int32{0, 1, 2, 3}}
	got, mean, most := regroupWindows(ms, 2, 4)
	require.Equal(t, []int32{0, 2, 1, 3}, got)
	require.Equal(t, 2.0, mean)
	require.Equal(t, 2, most)
	for _, res := range []int{16, 32} {
		ms := mustShellMap(t, res).Masked()
		n := len(ms.Gray)
		for _, bm := range []int{64, 128} {
			for _, w := range []int{256, 1000, 2048} {
				got, _, most := regroupWindows(ms, bm, w)
				require.GreaterOrEqual(t, most, 1, "RES %d BM %d window %d", res, bm, w)
				for s := 0; s < n; s += w {
					e := min(s+w, n)
					a, b := slices.Clone(ms.Gray[s:e]), slices.Clone(got[s:e])
					slices.Sort(a)
					slices.Sort(b)
					require.Equal(t, a, b, "RES %d BM %d window %d at %d", res, bm, w, s)
				}
				if w%bm == 0 { // else the windows' tiles straddle the order's
					require.LessOrEqual(t, orderWork(ms, got, bm), orderWork(ms, ms.Gray, bm), "RES %d BM %d window %d", res, bm, w)
				}
			}
		}
		want := ms.Gray
		if kmap.Regroups(n, ms.Words) {
			want, _, _ = regroupWindows(ms, kmap.RegroupTileRows, kmap.RegroupWindowRows)
		}
		require.Equal(t, want, ms.Order, "RES %d: the engines' order", res)
	}
}
