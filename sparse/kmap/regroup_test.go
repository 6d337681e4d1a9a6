package kmap

import (
	"cmp"
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// regroupByPicks is the greedy of RegroupWindow written row by row, its
// definition: a class is a maximal run of rows with equal masks in the
// window. Each tile starts with the unplaced rows, earliest first, as
// many as fit, of the class with the most of them, or, for odd tiles, of
// the class whose rows add the fewest taps to the previous tile's union
// (the one with the most unplaced rows, then the earliest, on ties);
// then, while it has room and rows remain, a pass places every unplaced
// row whose taps are all in the tile's union, in window order while
// there is room, and then, if there is room, the unplaced rows of the
// class adding the fewest taps (the one with the most unplaced rows, then
// the earliest, on ties), earliest first while there is room, whose taps
// join the union. Each tile's rows are then listed in window order.
func regroupByPicks(mask []uint64, window []int32, tileRows int) []int32 {
	n := len(window)
	class := make([]int, n) // the class of each position
	for p := 1; p < n; p++ {
		class[p] = class[p-1]
		if mask[window[p]] != mask[window[p-1]] {
			class[p]++
		}
	}
	placed := make([]bool, n)
	left := make([]int, class[n-1]+1) // unplaced rows per class
	for _, c := range class {
		left[c]++
	}
	var out []int32
	var union uint64
	for tile := 0; len(out) < n; tile++ {
		var members []int
		room := tileRows
		put := func(p int) {
			placed[p] = true
			members = append(members, p)
			left[class[p]]--
			room--
		}
		place := func(c int) {
			for p := range n {
				if class[p] == c && !placed[p] && room > 0 {
					put(p)
				}
			}
		}
		start, startAdd := -1, 0
		for p, r := range window {
			a := bits.OnesCount64(mask[r] &^ union)
			if tile%2 == 0 {
				a = 0
			}
			if !placed[p] && (start < 0 || a < startAdd || (a == startAdd && left[class[p]] > left[start])) {
				start, startAdd = class[p], a
			}
		}
		union = mask[window[slices.Index(class, start)]]
		place(start)
		for room > 0 && len(out)+len(members) < n {
			for p, r := range window {
				if !placed[p] && mask[r]&^union == 0 && room > 0 {
					put(p)
				}
			}
			best, bestAdd := -1, 0
			for p, r := range window {
				if placed[p] || room == 0 {
					continue
				}
				a := bits.OnesCount64(mask[r] &^ union)
				if best < 0 || a < bestAdd || (a == bestAdd && left[class[p]] > left[best]) {
					best, bestAdd = class[p], a
				}
			}
			if best < 0 {
				break
			}
			union |= mask[window[slices.Index(class, best)]]
			place(best)
		}
		slices.Sort(members)
		for _, p := range members {
			out = append(out, window[p])
		}
	}
	return out
}

// checkRegrouped verifies ms.Order against ms.Gray: the Gray order itself
// where Regroups says no; else, window by window, the greedy by picks.
func checkRegrouped(t *testing.T, ms *Masked) {
	t.Helper()
	n := len(ms.Gray)
	require.Len(t, ms.Order, n)
	if !Regroups(n, ms.Words) {
		require.Equal(t, ms.Gray, ms.Order)
		return
	}
	for lo := 0; lo < n; lo += RegroupWindowRows {
		hi := min(n, lo+RegroupWindowRows)
		require.Equal(t, regroupByPicks(ms.Mask, ms.Gray[lo:hi], RegroupTileRows), ms.Order[lo:hi], "window at %d", lo)
	}
}

func TestRegroupWindowByHand(t *testing.T) {
	// Rows alternate between two taps: as given, every 2-row tile holds
	// one of each (two taps per tile); regrouped, equal rows pair up.
	mask := []uint64{0b01, 0b10, 0b01, 0b10, 0b11}
	out := make([]int32, 4)
	passes := RegroupWindow(mask, []int32{0, 1, 2, 3}, 2, out)
	require.Equal(t, []int32{0, 2, 1, 3}, out)
	require.Equal(t, 2, passes)
	// Tiles of one row: the order stays, with no passes.
	require.Zero(t, RegroupWindow(mask, []int32{3, 1, 0}, 1, out[:3]))
	require.Equal(t, []int32{3, 1, 0}, out[:3])
	// A tile of three rows starting at row 4 (taps 0 and 1) takes both
	// rows it covers in one pass, then the last row starts a tile.
	out = make([]int32, 4)
	require.Equal(t, 1, RegroupWindow(mask, []int32{4, 0, 1, 2}, 3, out))
	require.Equal(t, []int32{4, 0, 1, 2}, out)
	// Rows that add taps: the one adding fewest joins first (row 2, not
	// row 1). The second tile starts with the row adding nothing to the
	// first's union (row 3), then takes rows 1 and 5, a pass each. Each
	// tile lists its rows in window order.
	mask = []uint64{0b0001, 0b1110, 0b0011, 0b0010, 0, 0b0111}
	out = make([]int32, 6)
	require.Equal(t, 3, RegroupWindow(mask, []int32{0, 1, 2, 3, 4, 5}, 3, out))
	require.Equal(t, []int32{0, 2, 4, 1, 3, 5}, out)
	// Classes: a tile starts with the largest (rows 1–3), and of the
	// classes adding one tap the larger (rows 4–5) gives what fits (row
	// 4). The second tile starts with the class adding the fewest taps to
	// the first's union (row 5, none) and takes, one pass each, the
	// earliest of those adding one tap (rows 0, 6, 7).
	mask = []uint64{0b0001, 0b0010, 0b0010, 0b0010, 0b0100, 0b0100, 0b1000, 0b0011}
	out = make([]int32, 8)
	require.Equal(t, 4, RegroupWindow(mask, []int32{0, 1, 2, 3, 4, 5, 6, 7}, 4, out))
	require.Equal(t, []int32{1, 2, 3, 4, 0, 5, 6, 7}, out)
}

// TestRegroupWindowRandom compares the passes with the greedy by picks on
// random masks of few taps (many ties) and of many, for tile heights that
// do and do not divide the window: in random order (classes of one row or
// a few) and sorted (the masks drawn from a pool: long classes).
func TestRegroupWindowRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, c := range []struct{ rows, V, tile, pool int }{
		{1, 27, 128, 0}, {5, 3, 2, 0}, {300, 4, 16, 0}, {777, 27, 128, 0}, {2048, 27, 128, 0}, {1000, 64, 100, 0}, {513, 8, 1, 0},
		{600, 27, 128, 30}, {2048, 27, 128, 200}, {1000, 64, 50, 12}, {333, 5, 7, 9},
	} {
		mask := synth.TapMasks(rng, c.rows, c.V, c.pool)
		window := make([]int32, c.rows)
		for i := range window {
			window[i] = int32(i)
		}
		rng.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
		if c.pool > 0 {
			slices.SortStableFunc(window, func(a, b int32) int { return cmp.Compare(mask[a], mask[b]) })
		}
		out := make([]int32, c.rows)
		RegroupWindow(mask, window, c.tile, out)
		require.Equal(t, regroupByPicks(mask, window, c.tile), out, "%+v", c)
	}
}

// TestRegroupedOrder checks the masked order of shells and random tables
// on both sides of the rules: single-word masks regrouped (fewer or equal
// products at RegroupTileRows on the shells), wider masks and tables over
// RegroupMaxRows in Gray order.
func TestRegroupedOrder(t *testing.T) {
	for _, res := range []int{64, 100} {
		m, err := NewSubmanifold(shellCoords(res, 1), shellExt(res), cube3(3), cube3(1))
		require.NoError(t, err)
		ms := m.Masked()
		require.True(t, Regroups(m.NOut, ms.Words))
		checkRegrouped(t, ms)
		gray := &Masked{V: ms.V, Words: ms.Words, Mask: ms.Mask, Gray: ms.Gray, Order: ms.Gray}
		require.LessOrEqual(t, ms.Tiles(RegroupTileRows).Work, gray.Tiles(RegroupTileRows).Work, "RES %d", res)
		require.Less(t, ms.Tiles(RegroupTileRows).Work, gray.Tiles(RegroupTileRows).Work, "RES %d: the shells gain", res)
	}
	require.True(t, Regroups(RegroupMaxRows, 1))
	require.True(t, Regroups(RegroupMinRows, 1))
	require.False(t, Regroups(RegroupMinRows-1, 1))
	require.False(t, Regroups(RegroupMaxRows+1, 1))
	require.False(t, Regroups(RegroupMaxRows, 2))
	require.True(t, RegroupsUpTo(RegroupMaxRows+1, 1, 2*RegroupMaxRows))
	require.False(t, RegroupsUpTo(2*RegroupMaxRows+1, 1, 2*RegroupMaxRows))
	require.False(t, RegroupsUpTo(RegroupMinRows-1, 1, 2*RegroupMaxRows))
	require.False(t, RegroupsUpTo(RegroupMaxRows, 1, RegroupMaxRows-1))
	require.False(t, RegroupsUpTo(RegroupMaxRows, 2, 2*RegroupMaxRows))
}
