package opkit

import (
	"runtime"
	"testing"
	"time"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func newMap(t *testing.T) *kmap.Map {
	m, err := kmap.NewSubmanifold([]int32{0, 0, 0, 0, 0, 1, 0, 0}, grid.Extent{Batch: 1, X: 2, Y: 1, Z: 1}, [3]int{3, 1, 1}, [3]int{1, 1, 1})
	require.NoError(t, err)
	return m
}

func TestMapID(t *testing.T) {
	a, b := newMap(t), newMap(t)
	ida, idb := MapID(a), MapID(b)
	require.NotZero(t, ida)
	require.NotZero(t, idb)
	require.NotEqual(t, ida, idb, "distinct maps with equal content get distinct ids")
	require.Equal(t, ida, MapID(a))
	require.Zero(t, MapID(nil))
	require.Contains(t, MapSignature(a), "submanifold")
	require.NotEqual(t, MapSignature(a), MapSignature(b))

	// Entries of collected maps are removed (no leak in graph-per-batch
	// training) and ids are not reused.
	count := func() int {
		n := 0
		mapIDs.Range(func(any, any) bool { n++; return true })
		return n
	}
	before := count()
	for range 100 {
		MapID(newMap(t))
	}
	require.GreaterOrEqual(t, count(), before)
	deadline := time.Now().Add(5 * time.Second)
	for count() > before && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.LessOrEqual(t, count(), before, "ids of collected maps must be dropped")
	require.Greater(t, MapID(newMap(t)), idb+100)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
}

func TestDenseMatrixRoundTrip(t *testing.T) {
	d := tensor.New(tensor.WithShape(2, 3), tensor.WithBacking([]float64{1, 2, 3, 4, 5, 6}))
	m, err := Matrix(d, "d", 3, 2)
	require.NoError(t, err)
	require.Equal(t, 3, m.Rows)
	m.F64()[0] = 10
	require.Equal(t, 10.0, d.Data().([]float64)[0], "Matrix must not copy")

	back, err := NewDense(m, 6)
	require.NoError(t, err)
	back.Data().([]float64)[1] = 20
	require.Equal(t, 20.0, d.Data().([]float64)[1], "NewDense must not copy")

	_, err = Matrix(d, "d", 4, 2)
	require.ErrorIs(t, err, ErrValue)
	_, err = Matrix(tensor.New(tensor.WithShape(2), tensor.WithBacking([]int32{1, 2})), "i", 1, 2)
	require.ErrorIs(t, err, ErrValue)
	_, err = NewDense(m, 5)
	require.ErrorIs(t, err, ErrValue)

	// A transposed view is materialised, giving row-major data.
	tv, err := d.SafeT()
	require.NoError(t, err)
	mt, err := Matrix(tv, "t", 3, 2)
	require.NoError(t, err)
	require.Equal(t, []float64{10, 4, 20, 5, 3, 6}, mt.F64())

	// Empty tensors work.
	e := tensor.New(tensor.Of(tensor.Float32), tensor.WithShape(0, 4))
	me, err := Matrix(e, "e", 0, 4)
	require.NoError(t, err)
	require.Equal(t, []float32{}, me.F32())
	de, err := NewDense(sparse.Matrix{Rows: 0, Cols: 4, Data: []float32{}}, 0, 4)
	require.NoError(t, err)
	require.Equal(t, tensor.Shape{0, 4}, de.Shape())
	i64, err := FromSlice([]int64{}, 0)
	require.NoError(t, err)
	require.Equal(t, tensor.Int64, i64.Dtype())
}

func TestAddInto(t *testing.T) {
	d := tensor.New(tensor.WithShape(3), tensor.WithBacking([]float32{1, 2, 3}))
	require.NoError(t, AddInto(d, "d", sparse.Matrix{Rows: 1, Cols: 3, Data: []float32{1, 1, 1}}))
	require.Equal(t, []float32{2, 3, 4}, d.Data())
	require.ErrorIs(t, AddInto(d, "d", sparse.Matrix{Rows: 1, Cols: 3, Data: []float64{1, 1, 1}}), ErrValue)
	require.ErrorIs(t, AddInto(d, "d", sparse.Matrix{Rows: 1, Cols: 2, Data: []float32{1, 1}}), ErrValue)
	var s gorgonia.Value = gorgonia.NewF64(1)
	require.ErrorIs(t, AddInto(s, "s", sparse.Matrix{}), ErrValue)
}

func TestChecks(t *testing.T) {
	require.NoError(t, CheckConvOptions("op", sparse.ConvOptions{Algorithm: sparse.Explicit, SplitK: 2}))
	require.ErrorIs(t, CheckConvOptions("op", sparse.ConvOptions{SplitK: -1}), ErrOption)
	require.ErrorIs(t, CheckConvOptions("op", sparse.ConvOptions{TileRows: -1}), sparse.ErrOptions)
	require.ErrorIs(t, CheckConvOptions("op", sparse.ConvOptions{Algorithm: -1}), sparse.ErrAlgorithm)
	require.ErrorIs(t, CheckArity("op", 2, 3), sparse.ErrShape)
	_, err := Shapes("op", 1, []gorgonia.DimSizer{tensor.Shape{1}, tensor.Shape{2}})
	require.ErrorIs(t, err, sparse.ErrShape)
	require.Equal(t, []bool{true, true}, AllTrue(2))
	require.ErrorIs(t, CheckWeight("op", newMap(t), tensor.Shape{1, 3, 1, 2, 1}), sparse.ErrShape)
	require.NoError(t, CheckWeight("op", newMap(t), tensor.Shape{1, 3, 1, 1, 1}))
}
