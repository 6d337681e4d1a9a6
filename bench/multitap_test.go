package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

func TestMultiTapTrafficByHand(t *testing.T) {
	// Four rows, four taps, slabs of two rows: slab {0, 1} has taps 0, 1
	// and 3 present, slab {2, 3} taps 2 and 3.
	ms := &kmap.Masked{V: 4, Words: 1, Mask: []uint64{0b0011, 0b1000, 0b0100, 0b1100}, Order: []int32{0, 1, 2, 3}}
	for _, c := range []struct {
		group        int
		dyRows, work int64
	}{
		{1, 10, 10}, // one dy load per tap present: 3·2 + 2·2
		{2, 6, 10},  // groups {0,1}, {2,3}: both in the first slab, {2,3} in the second
		{4, 4, 10},  // one dy load per slab
	} {
		dy, w := multiTapTraffic(ms, ms.Order, 2, c.group)
		require.Equal(t, c.dyRows, dy, "group %d", c.group)
		require.Equal(t, c.work, w, "group %d", c.group)
	}
	// The order decides the slabs: {0, 2} and {1, 3}.
	dy, w := multiTapTraffic(ms, []int32{0, 2, 1, 3}, 2, 4)
	require.Equal(t, int64(4), dy)
	require.Equal(t, int64(2*3+2*2), w)
}

func TestMultiTapTrafficSphere(t *testing.T) {
	m := shellMap(t, 16)
	ms := m.Masked()
	for _, rows := range []int{32, 64} {
		dy1, w1 := multiTapTraffic(ms, ms.Order, rows, 1)
		// The products are the masked tiles' work whatever the group …
		require.Equal(t, ms.Tiles(rows).Work, w1, "rows %d", rows)
		require.Equal(t, w1, dy1, "rows %d: one dy load per tap present", rows)
		prev := dy1
		for _, g := range []int{3, 9, 27} {
			dy, w := multiTapTraffic(ms, ms.Order, rows, g)
			require.Equal(t, w1, w, "rows %d group %d", rows, g)
			// … and larger groups load fewer dy rows, down to one load
			// per slab.
			require.LessOrEqual(t, dy, prev, "rows %d group %d", rows, g)
			prev = dy
		}
		require.Equal(t, int64(m.NOut), prev, "rows %d: every slab has a tap", rows)
	}
}
