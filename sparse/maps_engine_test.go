package sparse_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
)

// int32Storage is device coordinate data that no registered engine owns.
type int32Storage struct{ n int }

func (int32Storage) DType() sparse.DType { return sparse.Int32 }
func (s int32Storage) Len() int          { return s.n }

func TestMapsOfHostCoordinates(t *testing.T) {
	coords, ext := synth.SphereShell(12, 2)
	cm, err := sparse.MatrixOf(len(coords)/4, 4, coords)
	require.NoError(t, err)

	got, err := sparse.SubmanifoldMapOf(cm, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	want, err := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.Equal(t, want.Nbr, got.Nbr)

	conv := grid.Cube(2, 2, 0, 1)
	gs, err := sparse.StridedMapOf(cm, ext, conv, sparse.Matrix{})
	require.NoError(t, err)
	ws, err := kmap.NewStrided(coords, ext, conv, nil)
	require.NoError(t, err)
	require.Equal(t, ws.OutCoords, gs.OutCoords)
	require.Equal(t, ws.Nbr, gs.Nbr)

	// Given output coordinates: the generated ones, reversed.
	n := len(ws.OutCoords) / 4
	rev := make([]int32, 0, len(ws.OutCoords))
	for r := n - 1; r >= 0; r-- {
		rev = append(rev, ws.OutCoords[4*r:4*r+4]...)
	}
	om, err := sparse.MatrixOf(n, 4, rev)
	require.NoError(t, err)
	gg, err := sparse.StridedMapOf(cm, ext, conv, om)
	require.NoError(t, err)
	require.Equal(t, rev, gg.OutCoords)

	gt, err := sparse.TransposedMapOf(cm, ext, conv)
	require.NoError(t, err)
	wt, err := kmap.NewTransposed(coords, ext, conv)
	require.NoError(t, err)
	require.Equal(t, wt.Nbr, gt.Nbr)

	empty := sparse.NewMatrix[int32](0, 4)
	m0, err := sparse.SubmanifoldMapOf(empty, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	require.Zero(t, m0.NOut)
}

func TestMapsOfErrors(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	k, d := [3]int{3, 3, 3}, [3]int{1, 1, 1}
	f32 := sparse.NewMatrix[float32](2, 4)
	_, err := sparse.SubmanifoldMapOf(f32, ext, k, d)
	require.ErrorIs(t, err, sparse.ErrDType)

	three := sparse.NewMatrix[int32](2, 3)
	_, err = sparse.SubmanifoldMapOf(three, ext, k, d)
	require.ErrorIs(t, err, sparse.ErrShape)

	dev := sparse.Matrix{Rows: 2, Cols: 4, Data: int32Storage{8}}
	_, err = sparse.SubmanifoldMapOf(dev, ext, k, d)
	require.ErrorIs(t, err, sparse.ErrNoEngine)
	_, err = sparse.TransposedMapOf(dev, ext, grid.Cube(2, 2, 0, 1))
	require.ErrorIs(t, err, sparse.ErrNoEngine)

	host, err := sparse.MatrixOf(1, 4, []int32{0, 1, 1, 1})
	require.NoError(t, err)
	_, err = sparse.StridedMapOf(host, ext, grid.Cube(2, 2, 0, 1), dev)
	require.ErrorIs(t, err, sparse.ErrNoEngine)

	out, err := sparse.MatrixOf(1, 4, []int32{0, 9, 0, 0}) // outside the 2³ output grid
	require.NoError(t, err)
	_, err = sparse.StridedMapOf(host, ext, grid.Cube(2, 2, 0, 1), out)
	require.Error(t, err)

	even := [3]int{2, 3, 3}
	_, err = sparse.SubmanifoldMapOf(host, ext, even, d)
	require.ErrorIs(t, err, grid.ErrBadGeometry)
}

func ExampleSubmanifoldMapOf() {
	coords, _ := sparse.MatrixOf(3, 4, []int32{0, 1, 1, 1, 0, 1, 1, 2, 0, 2, 1, 1})
	m, err := sparse.SubmanifoldMapOf(coords, sparse.Extent{Batch: 1, X: 4, Y: 4, Z: 4}, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	if err != nil {
		panic(err)
	}
	fmt.Println(m.NOut, m.V(), m.Pairs().Count())
	// Output: 3 27 9
}
