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
		group  int
		dyRows int64
	}{
		{1, 10}, // one dy load per tap present: 3·2 + 2·2
		{2, 6},  // groups {0,1}, {2,3}: both in the first slab, {2,3} in the second
		{4, 4},  // one dy load per slab
	} {
		require.Equal(t, c.dyRows, multiTapTraffic(ms, ms.Order, 2, c.group), "group %d", c.group)
	}
	// The slabs multiply 3·2 + 2·2 (row, tap) products, whatever the group.
	require.Equal(t, int64(10), orderWork(ms, ms.Order, 2))
	// The order decides the slabs: {0, 2} and {1, 3}.
	order := []int32{0, 2, 1, 3}
	require.Equal(t, int64(4), multiTapTraffic(ms, order, 2, 4))
	require.Equal(t, int64(2*3+2*2), orderWork(ms, order, 2))
}

func TestMultiTapTrafficSphere(t *testing.T) {
	m := mustShellMap(t, 16)
	ms := m.Masked()
	for _, rows := range []int{32, 64} {
		// One tap per group loads the slab's dy rows once per tap present:
		// as many as the masked tiles of the slabs' height multiply …
		dy1 := multiTapTraffic(ms, ms.Order, rows, 1)
		require.Equal(t, ms.Tiles(rows).Work, dy1, "rows %d: one dy load per tap present", rows)
		prev := dy1
		for _, g := range []int{3, 9, 27} {
			dy := multiTapTraffic(ms, ms.Order, rows, g)
			// … and larger groups load fewer dy rows, down to one load
			// per slab.
			require.LessOrEqual(t, dy, prev, "rows %d group %d", rows, g)
			prev = dy
		}
		require.Equal(t, int64(m.NOut), prev, "rows %d: every slab has a tap", rows)
	}
}
