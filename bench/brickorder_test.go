package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBrickWindowLocality(t *testing.T) {
	cases := []struct {
		name             string
		coords           []int32
		window           int
		outside, partial float64
	}{
		// 108 bytes: sectors 0–2 whole, 96–107 in part.
		{"one row", []int32{0, 1, 1, 1}, 1, 0, 1.0 / 4},
		// Eight rows of one brick, 864 bytes: 27 whole sectors.
		{"one brick, eight rows", []int32{
			0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3,
			0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 1, 2, 0, 0, 1, 3,
		}, 1, 0, 0},
		// Two bricks along z, a row each, a window each: each brick's one
		// neighbour is in the other window; row 0 writes sectors 0–3
		// (3 in part), row 1 sectors 3–6 (3 and 6 in part).
		{"two bricks, two windows", []int32{0, 0, 0, 3, 0, 0, 0, 4}, 1, 1, 3.0 / 8},
		// Both in one window: bytes 0–215, sector 6 in part.
		{"two bricks, one window", []int32{0, 0, 0, 3, 0, 0, 0, 4}, 2, 0, 1.0 / 7},
		// Bricks of other batches are not neighbours.
		{"two batches", []int32{0, 0, 0, 3, 1, 0, 0, 4}, 1, 0, 3.0 / 8},
	}
	for _, c := range cases {
		for _, curve := range []bool{false, true} {
			outside, partial := brickWindowLocality(c.coords, c.window, curve)
			require.InDelta(t, c.outside, outside, 1e-12, "%s (curve %t): neighbours outside", c.name, curve)
			require.InDelta(t, c.partial, partial, 1e-12, "%s (curve %t): partial sectors", c.name, curve)
		}
	}
	// Four bricks in a line along z, claimed in the order 0, 2, 1, 3:
	// windows of two hold {0, 2}, {1, 3} in claim order, so every
	// neighbour is in the other window; in z-order {0, 1}, {2, 3}, and
	// only the pair 1–2 crosses.
	coords := []int32{0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 4, 0, 0, 0, 12}
	out, _ := brickWindowLocality(coords, 2, false)
	require.InDelta(t, 1, out, 1e-12, "claim order")
	out, _ = brickWindowLocality(coords, 2, true)
	require.InDelta(t, 2.0/6, out, 1e-12, "z-order")
}
