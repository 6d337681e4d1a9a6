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

func TestGrayRank64(t *testing.T) {
	for _, b := range []uint64{0, 1, 2, 3, 0b1011, 1<<27 - 1, 1 << 63, 0xdeadbeefcafef00d} {
		require.Equal(t, b, grayRank64(b^b>>1), "%#x", b)
	}
}

func TestBalancedTapOrder(t *testing.T) {
	// Tap 0 is in every row (uneven 4), tap 2 in one of four (uneven 2),
	// tap 1 in half (uneven 0): the key reads tap 0 as bit 0, tap 2 as
	// bit 1 and tap 1 as bit 2.
	ms := &kmap.Masked{V: 3, Words: 1, Mask: []uint64{0b011, 0b001, 0b111, 0b001}, Order: []int32{0, 1, 2, 3}}
	got, ok := balancedTapOrder(ms)
	require.True(t, ok)
	key := func(m uint64) uint64 { // tap 0 → bit 0, tap 2 → bit 1, tap 1 → bit 2
		g := m&1 | (m>>2&1)<<1 | (m>>1&1)<<2
		var r uint64
		for j := 2; j >= 0; j-- { // bit j of the rank: XOR of the bits ≥ j
			p := uint64(0)
			for k := j; k <= 2; k++ {
				p ^= g >> uint(k) & 1
			}
			r |= p << uint(j)
		}
		return r
	}
	want := []int32{0, 1, 2, 3}
	slices.SortStableFunc(want, func(a, b int32) int { return int(key(ms.Mask[a])) - int(key(ms.Mask[b])) })
	require.Equal(t, want, got)
	// Masks of more than one word are not handled.
	_, ok = balancedTapOrder(&kmap.Masked{V: 65, Words: 2, Mask: make([]uint64, 2), Order: []int32{0}})
	require.False(t, ok)
	// On the RES 64 shell it needs fewer products than the table-order
	// key (1.60× against 1.68× padding at BM 128).
	shell := mustShellMap(t, 64).Masked()
	order, ok := balancedTapOrder(shell)
	require.True(t, ok)
	require.Less(t, orderWork(shell, order, 128), shell.Tiles(128).Work)
}
