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

// TestRegroupRemainders checks the -fullfirst experiment: by hand, a
// class of two tiles' rows goes first whole and the rest is regrouped; on
// the shells the order is a permutation of the rows whose leading whole
// class tiles hold one mask each and which needs no more products than
// the Gray order.
func TestRegroupRemainders(t *testing.T) {
	// Gray order: a (1 row), b (4 rows), a (1 row) as classes of runs; with
	// 2-row tiles b fills two tiles, the two a rows share the third.
	ms := &kmap.Masked{V: 2, Words: 1, Mask: []uint64{0b01, 0b10, 0b10, 0b10, 0b10, 0b01}, Gray: []int32{0, 1, 2, 3, 4, 5}}
	got, _, most := regroupRemainders(ms, 2, 4)
	require.Equal(t, []int32{1, 2, 3, 4, 0, 5}, got)
	require.Equal(t, 0, most) // the two a rows are one class of the rest: the seed fills the tile
	require.Equal(t, int64(6), orderWork(ms, got, 2))
	for _, res := range []int{16, 32} {
		ms := mustShellMap(t, res).Masked()
		for _, bm := range []int{64, 128} {
			got, _, _ := regroupRemainders(ms, bm, 1024)
			a, b := slices.Clone(ms.Gray), slices.Clone(got)
			slices.Sort(a)
			slices.Sort(b)
			require.Equal(t, a, b, "RES %d BM %d", res, bm)
			require.LessOrEqual(t, orderWork(ms, got, bm), orderWork(ms, ms.Gray, bm), "RES %d BM %d", res, bm)
		}
	}
}

// TestRegroupMerge checks the -merge experiment: by hand, two clusters
// whose rows fill one tile together merge into it; on the shells the
// order is a permutation of the rows that, on the RES 32 shell, needs
// fewer products than the Gray order (the engines' order there).
func TestRegroupMerge(t *testing.T) {
	// Classes in Gray order: a (2 rows of tap 0), b (1 row of taps 0, 1),
	// c (1 row of taps 1 and 2). With 4-row tiles nothing fills a tile
	// alone; a and b pick each other (2/3 of a product a row added,
	// against 1 for b and c and 5/3 for a and c), then the three rows and
	// c's row fill the tile in the second round.
	ms := &kmap.Masked{V: 3, Words: 1, Mask: []uint64{0b001, 0b001, 0b011, 0b110}, Gray: []int32{0, 1, 2, 3}}
	got, rounds := regroupMerge(ms, 4)
	require.Equal(t, []int32{2, 3, 0, 1}, got) // classes of more taps first (b, c in cluster order), then a
	require.Equal(t, 2, rounds)
	for _, res := range []int{16, 32} {
		ms := mustShellMap(t, res).Masked()
		for _, bm := range []int{64, 128} {
			got, rounds := regroupMerge(ms, bm)
			require.Positive(t, rounds)
			a, b := slices.Clone(ms.Gray), slices.Clone(got)
			slices.Sort(a)
			slices.Sort(b)
			require.Equal(t, a, b, "RES %d BM %d", res, bm)
			if res >= 32 { // RES 16's 848 rows are under seven 128-row tiles: its leftovers cost more than the merges save
				require.Less(t, orderWork(ms, got, bm), orderWork(ms, ms.Gray, bm), "RES %d BM %d", res, bm)
			}
		}
	}
}
