package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

func TestHalfBalanceByHand(t *testing.T) {
	for _, tc := range []struct {
		name string
		taps [][]int32 // each tile's union, V = 27 (centre 13)
		want float64
	}{
		{"no tiles", nil, 1},
		{"centre only", [][]int32{{13}}, 0.5},                    // 1 of 2 iterations
		{"mirror pair and centre", [][]int32{{4, 13, 22}}, 0.75}, // halves 2 and 1
		{"the centre evens the halves", [][]int32{{0, 1, 13, 26}}, 1},
		{"one side only", [][]int32{{0, 1, 2}}, 0.5},
		{"two tiles", [][]int32{{0, 26}, {0, 1, 13, 25, 26}}, 7.0 / 8},
	} {
		tiles := &kmap.Tiles{Seg: []int32{0}}
		for _, u := range tc.taps {
			tiles.Taps = append(tiles.Taps, u...)
			tiles.Seg = append(tiles.Seg, int32(len(tiles.Taps)))
		}
		require.InDelta(t, tc.want, halfBalance(tiles, 27, []int32{13}), 1e-12, tc.name)
	}
}

func TestHalfBalanceFlexibleTaps(t *testing.T) {
	one := func(taps ...int32) *kmap.Tiles {
		return &kmap.Tiles{Seg: []int32{0, int32(len(taps))}, Taps: taps}
	}
	// One side only: the centre alone cannot even out three taps, three
	// flexible ones can.
	require.InDelta(t, 4.0/6, halfBalance(one(0, 1, 2, 13), 27, []int32{13}), 1e-12)
	require.InDelta(t, 1.0, halfBalance(one(0, 1, 2, 13), 27, []int32{1, 2, 13}), 1e-12)
	// No flexible taps: the centre counts with the upper half.
	require.InDelta(t, 0.5, halfBalance(one(13), 27, nil), 1e-12)
}

func TestHalfBalanceOfTheShell(t *testing.T) {
	// A shell's tile unions are nearly mirror-symmetric: the halves balance
	// within a tap, and no worse than the worst case.
	ms := mustShellMap(t, 32).Masked()
	for _, bm := range []int{64, 128} {
		b := halfBalance(ms.Tiles(bm), 27, []int32{13})
		require.Greater(t, b, 0.85, "BM %d", bm)
		require.LessOrEqual(t, b, 1.0, "BM %d", bm)
		// Taps resident in both halves can only help.
		faces := halfBalance(ms.Tiles(bm), 27, []int32{13, 4, 10, 12, 14, 16, 22})
		require.GreaterOrEqual(t, faces, b, "BM %d", bm)
		require.LessOrEqual(t, faces, 1.0, "BM %d", bm)
	}
}
