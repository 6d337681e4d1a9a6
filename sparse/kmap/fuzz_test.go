package kmap

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
)

// fuzzCoords decodes 4 bytes per row. With raw, the bytes are signed values
// used as they are (so rows may fall outside ext); otherwise they are
// reduced into ext. With unique, repeated rows are dropped.
func fuzzCoords(data []byte, ext grid.Extent, raw, unique bool) []int32 {
	coords := []int32{}
	seen := map[[4]int32]bool{}
	dims := [4]int{ext.Batch, ext.X, ext.Y, ext.Z}
	for len(data) >= 4 {
		var c [4]int32
		for a := range 4 {
			if raw {
				c[a] = int32(int8(data[a]))
			} else {
				c[a] = int32(int(data[a]) % dims[a])
			}
		}
		data = data[4:]
		if unique && seen[c] {
			continue
		}
		seen[c] = true
		coords = append(coords, c[:]...)
	}
	return coords
}

// expectCoordsError returns the error the builders must report for coords:
// the first row outside ext, else the earliest row equal to an earlier one.
func expectCoordsError(coords []int32, ext grid.Extent) (error, string) {
	d := dimsOf(ext)
	for r := 0; r < len(coords)/4; r++ {
		c := coords[4*r:]
		if !d.inside(int(c[0]), int(c[1]), int(c[2]), int(c[3])) {
			return ErrOutOfRange, fmt.Sprintf("row %d (%d, %d, %d, %d)", r, c[0], c[1], c[2], c[3])
		}
	}
	first := map[[4]int32]int{}
	for r := 0; r < len(coords)/4; r++ {
		c := [4]int32(coords[4*r : 4*r+4])
		if q, ok := first[c]; ok {
			return ErrDuplicate, fmt.Sprintf("rows %d and %d", q, r)
		}
		first[c] = r
	}
	return nil, ""
}

func FuzzSubmanifold(f *testing.F) {
	f.Add([]byte{3, 3, 3, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 2, 2, 2})
	f.Add([]byte{5, 4, 3, 1, 2, 0, 1, 2, 5, 1, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{2, 2, 2, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 255, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 8 {
			return
		}
		ext := grid.Extent{Batch: 1 + int(data[3]&1), X: 1 + int(data[0])%7, Y: 1 + int(data[1])%7, Z: 1 + int(data[2])%7}
		raw := data[3]&128 != 0
		var kernel, dil [3]int
		for a := range 3 {
			kernel[a] = 1 + 2*(int(data[4+a])%3)
			dil[a] = 1 + int(data[4+a]/3)%3
		}
		coords := fuzzCoords(data[8:], ext, raw, false)
		m, err := NewSubmanifold(coords, ext, kernel, dil)
		if want, msg := expectCoordsError(coords, ext); want != nil {
			require.ErrorIs(t, err, want)
			require.ErrorContains(t, err, msg)
			return
		}
		require.NoError(t, err)
		require.Equal(t, bruteSubmanifold(coords, ext, kernel, dil), m.Nbr)
		checkMap(t, m)
	})
}

func FuzzStrided(f *testing.F) {
	f.Add([]byte{4, 4, 4, 0, 2, 2, 2, 1, 1, 1, 0, 1, 2, 3, 0, 0, 0, 0, 0, 1, 2, 3})
	f.Add([]byte{6, 5, 3, 1, 3, 1, 2, 2, 3, 1, 5, 9, 7, 1, 0, 2, 3, 3, 3, 3, 1, 4, 1, 5})
	f.Add([]byte{1, 1, 1, 0, 4, 4, 4, 3, 3, 3, 2, 2, 2, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 13 {
			return
		}
		ext := grid.Extent{Batch: 1 + int(data[3]&1), X: 1 + int(data[0])%7, Y: 1 + int(data[1])%7, Z: 1 + int(data[2])%7}
		var conv grid.Conv
		for a := range 3 {
			conv.Kernel[a] = 1 + int(data[4+a])%4
			conv.Stride[a] = 1 + int(data[7+a])%3
			conv.Padding[a] = int(data[10+a]) % 3
			conv.Dilation[a] = 1 + int(data[4+a]/4)%2
		}
		coords := fuzzCoords(data[13:], ext, false, true)

		wantOut, wantOC, wantNbr, ok := bruteStrided(coords, ext, conv, nil)
		s, err := NewStrided(coords, ext, conv, nil)
		if !ok {
			require.ErrorIs(t, err, grid.ErrBadGeometry)
		} else {
			require.NoError(t, err)
			require.Equal(t, wantOut, s.Out)
			require.Equal(t, wantOC, s.OutCoords)
			require.Equal(t, wantNbr, s.Nbr)
			checkMap(t, s)
			inv, err := NewInverse(s)
			require.NoError(t, err)
			require.Equal(t, coords, inv.OutCoords)
			require.Equal(t, bruteInverse(coords, ext, conv, s.Out, s.OutCoords), inv.Nbr)
			checkMap(t, inv)
		}

		wantOut, wantOC, wantNbr, ok = bruteTransposed(coords, ext, conv)
		tr, err := NewTransposed(coords, ext, conv)
		if !ok {
			require.ErrorIs(t, err, grid.ErrBadGeometry)
			return
		}
		require.NoError(t, err)
		require.Equal(t, wantOut, tr.Out)
		require.Equal(t, wantOC, tr.OutCoords)
		require.Equal(t, wantNbr, tr.Nbr)
		checkMap(t, tr)
	})
}
