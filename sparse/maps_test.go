package sparse

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
)

func TestMapWrappers(t *testing.T) {
	ext := Extent{Batch: 2, X: 6, Y: 5, Z: 4}
	coords := []int32{0, 0, 0, 0, 1, 5, 4, 3, 0, 2, 2, 2, 0, 3, 2, 2, 1, 2, 3, 1}
	tn, err := NewTensor(coords, NewMatrix[float64](5, 2), ext)
	require.NoError(t, err)
	conv := grid.Cube(3, 2, 1, 1)

	sm, err := SubmanifoldMap(tn, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	want, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.Equal(t, want.Nbr, sm.Nbr)

	st, err := StridedMap(tn, conv, nil)
	require.NoError(t, err)
	wantSt, err := kmap.NewStrided(coords, ext, conv, nil)
	require.NoError(t, err)
	require.Equal(t, wantSt.OutCoords, st.OutCoords)
	require.Equal(t, wantSt.Nbr, st.Nbr)

	given := []int32{1, 0, 0, 0, 0, 1, 1, 1}
	gm, err := StridedMap(tn, conv, given)
	require.NoError(t, err)
	require.Equal(t, given, gm.OutCoords)

	inv, err := InverseMap(st)
	require.NoError(t, err)
	require.Equal(t, coords, inv.OutCoords)
	require.Equal(t, st.Reverse(), inv.Nbr)

	tr, err := TransposedMap(tn, conv)
	require.NoError(t, err)
	wantTr, err := kmap.NewTransposed(coords, ext, conv)
	require.NoError(t, err)
	require.Equal(t, wantTr.OutCoords, tr.OutCoords)
	require.Equal(t, wantTr.Nbr, tr.Nbr)
}

func TestMapWrapperErrors(t *testing.T) {
	ext := Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	good, err := NewTensor([]int32{0, 1, 1, 1, 0, 2, 2, 2}, NewMatrix[float32](2, 1), ext)
	require.NoError(t, err)
	// Tensor fields are exported, so a tensor can be broken after NewTensor.
	dup := &Tensor{Coords: []int32{0, 1, 1, 1, 0, 2, 2, 2, 0, 1, 1, 1}, Feats: NewMatrix[float32](3, 1), Extent: ext}
	outside := &Tensor{Coords: []int32{0, 4, 0, 0}, Feats: NewMatrix[float32](1, 1), Extent: ext}
	ragged := &Tensor{Coords: []int32{0, 1, 1}, Extent: ext}
	sub, err := SubmanifoldMap(good, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	cases := []struct {
		name  string
		build func() (*kmap.Map, error)
		is    []error
		msg   string
	}{
		{"nil submanifold", func() (*kmap.Map, error) { return SubmanifoldMap(nil, [3]int{3, 3, 3}, [3]int{1, 1, 1}) }, []error{ErrShape}, "nil tensor"},
		{"nil strided", func() (*kmap.Map, error) { return StridedMap(nil, grid.Cube(2, 2, 0, 1), nil) }, []error{ErrShape}, "nil tensor"},
		{"nil transposed", func() (*kmap.Map, error) { return TransposedMap(nil, grid.Cube(2, 2, 0, 1)) }, []error{ErrShape}, "nil tensor"},
		{"nil inverse", func() (*kmap.Map, error) { return InverseMap(nil) }, []error{ErrShape, kmap.ErrMap}, "sparse: InverseMap: kmap: bad map"},
		{"inverse of submanifold", func() (*kmap.Map, error) { return InverseMap(sub) }, []error{ErrShape, kmap.ErrMap}, "needs a strided map"},
		{"duplicate", func() (*kmap.Map, error) { return SubmanifoldMap(dup, [3]int{3, 3, 3}, [3]int{1, 1, 1}) }, []error{ErrDuplicate, kmap.ErrDuplicate},
			"sparse: SubmanifoldMap: kmap: duplicate coordinate: rows 0 and 2 are both (0, 1, 1, 1)"},
		{"outside", func() (*kmap.Map, error) { return StridedMap(outside, grid.Cube(2, 2, 0, 1), nil) }, []error{ErrOutOfRange, kmap.ErrOutOfRange}, "row 0 (0, 4, 0, 0)"},
		{"ragged", func() (*kmap.Map, error) { return TransposedMap(ragged, grid.Cube(2, 2, 0, 1)) }, []error{ErrShape, kmap.ErrCoords}, "length 3"},
		{"given outputs outside", func() (*kmap.Map, error) { return StridedMap(good, grid.Cube(2, 2, 0, 1), []int32{0, 2, 0, 0}) }, []error{ErrOutOfRange}, "output coordinates"},
		{"even submanifold kernel", func() (*kmap.Map, error) { return SubmanifoldMap(good, [3]int{2, 2, 2}, [3]int{1, 1, 1}) }, []error{grid.ErrBadGeometry}, "sparse: SubmanifoldMap: grid: bad convolution geometry"},
		{"strided geometry", func() (*kmap.Map, error) { return StridedMap(good, grid.Cube(2, 0, 0, 1), nil) }, []error{grid.ErrBadGeometry}, "stride"},
		{"transposed empty", func() (*kmap.Map, error) { return TransposedMap(good, grid.Cube(1, 1, 4, 1)) }, []error{grid.ErrBadGeometry}, "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := c.build()
			require.Nil(t, m)
			for _, is := range c.is {
				require.ErrorIs(t, err, is)
			}
			require.ErrorContains(t, err, c.msg)
			require.False(t, errors.Is(err, ErrDType))
		})
	}
}
