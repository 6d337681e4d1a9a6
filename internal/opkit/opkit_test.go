package opkit

import (
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/flexgemm-go/flexgemm/ops/device"
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

func TestConvSignature(t *testing.T) {
	m := newMap(t)
	plain := ConvSignature(m, sparse.ConvOptions{Algorithm: sparse.Explicit, SplitK: 2, TileRows: 64})
	require.Contains(t, plain, MapSignature(m))
	require.Contains(t, plain, "splitk=2 tile=64")
	require.NotContains(t, plain, "narrow")
	narrow := ConvSignature(m, sparse.ConvOptions{Algorithm: sparse.Explicit, SplitK: 2, TileRows: 64, NarrowWeightGrad: true})
	require.NotEqual(t, plain, narrow, "ops asking for narrow weight gradients must not be merged with the others")
	require.Contains(t, narrow, "narrow-wgrad")
}

// TestConvGradientsFloat32 checks the mixed-precision contract on the
// emulated device: weight and bias gradients of float16/bfloat16
// activations come out of the engine in float32 (Master passes them
// through untouched), equal to the float32 computation on the rounded
// inputs; NarrowWeightGrad gives the rounded result, which Master widens.
// The values are large enough that a float16 result overflows.
func TestConvGradientsFloat32(t *testing.T) {
	m := newMap(t) // 2 sites, kernel 3×1×1
	const ci, co = 2, 3
	xs := []float32{2, 1.00048828125, 3, 0.5}
	dys := []float32{30000, 1.25, 0.1, 40000.5, 3, 7}
	for _, act := range []sparse.DType{sparse.Float16, sparse.BFloat16} {
		d, err := device.OpenFake(device.WithActivations(act))
		require.NoError(t, err)
		st, err := d.BeginStep()
		require.NoError(t, err)
		x, err := d.Upload(sparse.Matrix{Rows: m.NIn, Cols: ci, Data: xs}, act, device.Other)
		require.NoError(t, err)
		dy, err := d.Upload(sparse.Matrix{Rows: m.NOut, Cols: co, Data: dys}, act, device.Other)
		require.NoError(t, err)
		rounded := func(a []float32) []float32 {
			out := make([]float32, len(a))
			for i, v := range a {
				out[i] = device.RoundTo(act, v)
			}
			return out
		}
		hx := sparse.Matrix{Rows: m.NIn, Cols: ci, Data: rounded(xs)}
		hdy := sparse.Matrix{Rows: m.NOut, Cols: co, Data: rounded(dys)}
		wantDW, err := sparse.ConvWeightGrad(m, hx, hdy, sparse.ConvOptions{})
		require.NoError(t, err)
		wantDB, err := sparse.BiasGrad(hdy)
		require.NoError(t, err)
		big := false
		for _, v := range wantDW.F32() {
			big = big || v > 65504
		}
		require.True(t, big, "the weight gradient must exceed the float16 range")

		dw, err := sparse.ConvWeightGrad(m, x, dy, sparse.ConvOptions{})
		require.NoError(t, err)
		dt, _ := dw.DType()
		require.Equal(t, sparse.Float32, dt, "%v weight gradient", act)
		master, err := Master(dw)
		require.NoError(t, err)
		require.Equal(t, dw, master, "a float32 gradient is not converted")
		h, err := d.Download(dw, device.Other)
		require.NoError(t, err)
		require.Equal(t, wantDW.F32(), h.F32(), "%v: the float32 sums, not rounded", act)

		db, err := sparse.BiasGrad(dy)
		require.NoError(t, err)
		dt, _ = db.DType()
		require.Equal(t, sparse.Float32, dt, "%v bias gradient", act)
		h, err = d.Download(db, device.Other)
		require.NoError(t, err)
		require.Equal(t, wantDB.F32(), h.F32())

		// Asked for: the narrow result, converted back by Master.
		dwN, err := sparse.ConvWeightGrad(m, x, dy, sparse.ConvOptions{NarrowWeightGrad: true})
		require.NoError(t, err)
		dt, _ = dwN.DType()
		require.Equal(t, act, dt)
		wide, err := Master(dwN)
		require.NoError(t, err)
		dt, _ = wide.DType()
		require.Equal(t, sparse.Float32, dt)
		h, err = d.Download(wide, device.Other)
		require.NoError(t, err)
		require.Equal(t, rounded(wantDW.F32()), h.F32())
		if act == sparse.Float16 {
			require.Contains(t, h.F32(), float32(math.Inf(1)), "a float16 weight gradient overflows")
		}
		st.End()
		require.NoError(t, d.Close())
	}
}
