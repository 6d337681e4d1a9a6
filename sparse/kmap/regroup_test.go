package kmap

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// regroupByPicks is the greedy of RegroupWindow written pick by pick, its
// definition: each tile starts with the first unplaced row of the window,
// then takes, one row at a time while it has room, the unplaced row that
// adds the fewest taps to its union, the earliest on ties; each tile's
// rows are then listed in window order.
func regroupByPicks(mask []uint64, window []int32, tileRows int) []int32 {
	placed := make([]bool, len(window))
	var out []int32
	for len(out) < len(window) {
		first := slices.Index(placed, false)
		placed[first] = true
		members := []int{first}
		union := mask[window[first]]
		for k := 1; k < tileRows; k++ {
			best, bestAdd := -1, 65
			for p, r := range window {
				if a := bits.OnesCount64(mask[r] &^ union); !placed[p] && a < bestAdd {
					best, bestAdd = p, a
				}
			}
			if best < 0 {
				break
			}
			placed[best] = true
			members = append(members, best)
			union |= mask[window[best]]
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
	// Rows that add taps: the one adding fewest goes first (row 2 before
	// row 1), then the rows it made free (row 3); the tile lists its rows
	// in window order.
	mask = []uint64{0b0001, 0b1110, 0b0011, 0b0010, 0, 0b0111}
	out = make([]int32, 6)
	require.Equal(t, 2, RegroupWindow(mask, []int32{0, 1, 2, 3, 4, 5}, 3, out))
	require.Equal(t, []int32{0, 2, 4, 1, 3, 5}, out)
}

// TestRegroupWindowRandom compares the passes with the greedy by picks on
// random masks of few taps (many ties) and of many, for tile heights that
// do and do not divide the window.
func TestRegroupWindowRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, c := range []struct{ rows, V, tile int }{
		{1, 27, 128}, {5, 3, 2}, {300, 4, 16}, {777, 27, 128}, {2048, 27, 128}, {1000, 64, 100}, {513, 8, 1},
	} {
		mask := make([]uint64, c.rows)
		for r := range mask {
			for v := range c.V {
				if rng.IntN(3) == 0 {
					mask[r] |= 1 << v
				}
			}
		}
		window := make([]int32, c.rows)
		for i := range window {
			window[i] = int32(i)
		}
		rng.Shuffle(len(window), func(i, j int) { window[i], window[j] = window[j], window[i] })
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
	for _, res := range []int{32, 48} {
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
}
