package cudaext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPerTapGroupsOf checks the group count of per-tap gathers: one buffer
// when the slots fit the single limit, else the fewest groups within the
// group limit, and none (the masked gather) when no group could hold a tile
// or more than perTapMaxGroups would be needed.
func TestPerTapGroupsOf(t *testing.T) {
	const tile = 1 << 20 // bytes of products a tile
	for _, c := range []struct {
		name                                  string
		tiles, tileBytes, single, group, want int64
	}{
		{"fits the single limit", 32, tile, 32 * tile, 0, 1},
		{"fits exactly with groups on", 32, tile, 32 * tile, 4 * tile, 1},
		{"over the limit, no groups", 33, tile, 32 * tile, 0, 0},
		{"single limit off, no groups", 1, tile, 0, 0, 0},
		{"two groups", 40, tile, 32 * tile, 20 * tile, 2},
		{"three groups, last one short", 41, tile, 32 * tile, 20 * tile, 3},
		{"group limit not a whole tile", 40, tile, 0, 20*tile + tile/2, 2},
		{"three groups, the most", 60, tile, 0, 20 * tile, 3},
		{"four groups: masked", 61, tile, 0, 20 * tile, 0},
		{"group smaller than a tile", 4, tile, 0, tile - 1, 0},
		// tf32 (64, 1024, 2): 1,510 tiles of 128 slots × 1,024 float32
		// columns against results of 15,192 rows.
		{"tf32 (64, 1024, 2), four results: masked", 1510, 128 * 1024 * 4, 32 << 20, 4 * 15192 * 1024 * 4, 0},
		{"tf32 (64, 1024, 2), six results", 1510, 128 * 1024 * 4, 32 << 20, 6 * 15192 * 1024 * 4, 3},
		{"tf32 (64, 1024, 2), eight results", 1510, 128 * 1024 * 4, 32 << 20, 8 * 15192 * 1024 * 4, 2},
	} {
		require.Equal(t, c.want, perTapGroupsOf(c.tiles, c.tileBytes, c.single, c.group), c.name)
	}
}

// TestTapOfTile checks the tap of a tile over taps with and without pairs
// (a tap without pairs has no tiles: its first tile is the next tap's).
func TestTapOfTile(t *testing.T) {
	first := []int64{0, 3, 3, 5, 9, 9, 9, 10} // taps 1, 4 and 5 are empty
	want := []int64{0, 0, 0, 2, 2, 3, 3, 3, 3, 6}
	for tile, k := range want {
		require.Equal(t, k, tapOfTile(first, int64(tile)), "tile %d", tile)
	}
	require.Equal(t, int64(0), tapOfTile([]int64{0, 1}, 0), "one tap of one tile")
}

// TestTapFirstTiles checks the tap segments' first tiles, empty taps
// included.
func TestTapFirstTiles(t *testing.T) {
	require.Equal(t, []int64{0, 3, 3, 5, 6}, tapFirstTiles([]int64{300, 0, 129, 1}, 128))
	require.Equal(t, []int64{0}, tapFirstTiles(nil, 128))
}

// TestPerTapLayout checks the slot tables' block: each table on a
// 256-byte (64-word) boundary after the one before it, the block just
// long enough for the last.
func TestPerTapLayout(t *testing.T) {
	for _, c := range []struct{ rows, nV, tiles int64 }{{128, 27, 1}, {193280, 15192 * 27, 1510}, {64, 64, 63}} {
		l := perTapLayoutOf(c.rows, c.nV, c.tiles)
		for _, off := range []int64{l.slot, l.seg, l.taps} {
			require.Zero(t, off%64, "%+v: %+v", c, l)
		}
		require.GreaterOrEqual(t, l.slot, c.rows)
		require.Less(t, l.slot-c.rows, int64(64))
		require.GreaterOrEqual(t, l.seg-l.slot, c.nV)
		require.Less(t, l.seg-l.slot-c.nV, int64(64))
		require.GreaterOrEqual(t, l.taps-l.seg, c.tiles+1)
		require.Less(t, l.taps-l.seg-c.tiles-1, int64(64))
		require.Equal(t, l.taps+c.tiles, l.words)
	}
}
