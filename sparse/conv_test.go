package sparse_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/reference"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
	"github.com/stretchr/testify/require"
)

// convProblem is a small strided convolution with its dense-oracle answer.
type convProblem struct {
	m                     *kmap.Map
	ci, co                int
	x, w, b, dy           []float64
	wantY, wantDX, wantDW []float64
	wantDB                []float64
}

func newConvProblem(t *testing.T, seed uint64) *convProblem {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 11))
	ext := grid.Extent{Batch: 2, X: 7, Y: 6, Z: 8}
	coords := synth.RandomScene(rng, ext, 0.3)
	conv := grid.Conv{Kernel: [3]int{3, 2, 3}, Stride: [3]int{2, 1, 2}, Padding: [3]int{1, 0, 1}, Dilation: [3]int{1, 2, 1}}
	m, err := kmap.NewStrided(coords, ext, conv, nil)
	require.NoError(t, err)
	p := &convProblem{m: m, ci: 5, co: 7}
	p.x = roundF32(synth.Uniform[float64](rng, m.NIn*p.ci))
	p.w = roundF32(synth.Weights[float64](rng, p.co, m.V(), p.ci))
	p.b = roundF32(synth.Uniform[float64](rng, p.co))
	p.dy = roundF32(synth.Uniform[float64](rng, m.NOut*p.co))
	in := reference.Sparse{Coords: coords, Feats: p.x, C: p.ci, Extent: ext}
	w := reference.Weight{W: p.w, Co: p.co, Ci: p.ci, K: conv.Kernel}
	g := reference.Geometry{Stride: conv.Stride, Padding: conv.Padding, Dilation: conv.Dilation}
	p.wantY = reference.Conv3d(in, w, p.b, g, m.OutCoords)
	p.wantDX, p.wantDW, p.wantDB = reference.Conv3dGrad(in, w, g, m.OutCoords, p.dy)
	return p
}

// roundF32 rounds to float32 precision so both dtypes see the same data.
func roundF32(v []float64) []float64 {
	for i, x := range v {
		v[i] = float64(float32(x))
	}
	return v
}

func matrixOf[T float32 | float64](t *testing.T, rows, cols int, v []float64) sparse.Matrix {
	d := make([]T, len(v))
	for i, x := range v {
		d[i] = T(x)
	}
	m, err := sparse.MatrixOf(rows, cols, d)
	require.NoError(t, err)
	return m
}

func requireMatrix(t *testing.T, want []float64, rows, cols int, got sparse.Matrix, tol float64, what string) {
	t.Helper()
	require.Equal(t, rows, got.Rows, what)
	require.Equal(t, cols, got.Cols, what)
	g, err := got.Float64s()
	require.NoError(t, err)
	var num, den float64
	for i := range want {
		num += (g[i] - want[i]) * (g[i] - want[i])
		den += want[i] * want[i]
	}
	require.LessOrEqual(t, math.Sqrt(num), tol*math.Sqrt(den), "%s: relative L2 error", what)
}

func testPublicConv[T float32 | float64](t *testing.T, p *convProblem, opt sparse.ConvOptions, tol float64) {
	m := p.m
	V := m.V()
	x := matrixOf[T](t, m.NIn, p.ci, p.x)
	w := matrixOf[T](t, p.co, V*p.ci, p.w)
	b := matrixOf[T](t, 1, p.co, p.b)
	dy := matrixOf[T](t, m.NOut, p.co, p.dy)
	what := fmt.Sprintf("%v %T", opt.Algorithm, *new(T))

	y, err := sparse.Conv(m, x, w, b, opt)
	require.NoError(t, err)
	requireMatrix(t, p.wantY, m.NOut, p.co, y, tol, what+" Conv")
	dx, err := sparse.ConvInputGrad(m, dy, w, opt)
	require.NoError(t, err)
	requireMatrix(t, p.wantDX, m.NIn, p.ci, dx, tol, what+" ConvInputGrad")
	dw, err := sparse.ConvWeightGrad(m, x, dy, opt)
	require.NoError(t, err)
	requireMatrix(t, p.wantDW, p.co, V*p.ci, dw, tol, what+" ConvWeightGrad")
	db, err := sparse.BiasGrad(dy)
	require.NoError(t, err)
	requireMatrix(t, p.wantDB, 1, p.co, db, tol, what+" BiasGrad")
	dw, db, err = sparse.ConvParamGrads(m, x, dy, opt)
	require.NoError(t, err)
	requireMatrix(t, p.wantDW, p.co, V*p.ci, dw, tol, what+" ConvParamGrads weight")
	requireMatrix(t, p.wantDB, 1, p.co, db, tol, what+" ConvParamGrads bias")
}

// TestConvMatchesOracle runs the public API on the CPU engine for every
// algorithm and both dtypes against the dense float64 oracle.
func TestConvMatchesOracle(t *testing.T) {
	p := newConvProblem(t, 1)
	for _, alg := range append([]sparse.Algorithm{sparse.Auto}, sparse.Algorithms...) {
		for _, opt := range []sparse.ConvOptions{{Algorithm: alg}, {Algorithm: alg, SplitK: 3, TileRows: 8}} {
			t.Run(fmt.Sprintf("%v/%d/%d", alg, opt.SplitK, opt.TileRows), func(t *testing.T) {
				testPublicConv[float64](t, p, opt, 1e-12)
				testPublicConv[float32](t, p, opt, 1e-5)
			})
		}
	}
}

func TestCPUEngineIsDefault(t *testing.T) {
	e, err := sparse.EngineFor(sparse.NewMatrix[float32](2, 3), sparse.NewMatrix[float64](1, 1), sparse.NewMatrix[int32](1, 1))
	require.NoError(t, err)
	require.Equal(t, "cpu", e.Name())
	require.False(t, e.Owns(sparse.Matrix{Rows: 1, Cols: 1, Data: fakeStorage{1}}))
}

// fakeStorage is n float32 elements of device data that no registered
// engine owns.
type fakeStorage struct{ n int }

func (fakeStorage) DType() sparse.DType { return sparse.Float32 }
func (f fakeStorage) Len() int          { return f.n }

// TestConvValidation checks the errors of Conv, ConvInputGrad,
// ConvWeightGrad and BiasGrad for malformed arguments.
func TestConvValidation(t *testing.T) {
	p := newConvProblem(t, 2)
	m := p.m
	V := m.V()
	x := matrixOf[float32](t, m.NIn, p.ci, p.x)
	w := matrixOf[float32](t, p.co, V*p.ci, p.w)
	b := matrixOf[float32](t, 1, p.co, p.b)
	dy := matrixOf[float32](t, m.NOut, p.co, p.dy)
	w64 := matrixOf[float64](t, p.co, V*p.ci, p.w)
	xi := sparse.NewMatrix[int32](m.NIn, p.ci)
	wi := sparse.NewMatrix[int32](p.co, V*p.ci)
	dev := sparse.Matrix{Rows: 1, Cols: 1, Data: fakeStorage{1}}
	devW := sparse.Matrix{Rows: p.co, Cols: V * p.ci, Data: fakeStorage{p.co * V * p.ci}}
	ok := sparse.ConvOptions{}
	badTable := &kmap.Map{Kind: m.Kind, Conv: m.Conv, In: m.In, Out: m.Out, NIn: m.NIn, NOut: m.NOut, OutCoords: m.OutCoords, Nbr: m.Nbr[:len(m.Nbr)-1]}
	badEntry := &kmap.Map{Kind: m.Kind, Conv: m.Conv, In: m.In, Out: m.Out, NIn: m.NIn, NOut: m.NOut, OutCoords: m.OutCoords, Nbr: append([]int32{int32(m.NIn)}, m.Nbr[1:]...)}

	cases := []struct {
		name string
		err  error
		want error
	}{
		{"nil map", func() error { _, e := sparse.Conv(nil, x, w, b, ok); return e }(), sparse.ErrShape},
		{"short table", func() error { _, e := sparse.Conv(badTable, x, w, b, ok); return e }(), sparse.ErrShape},
		{"table entry out of range", func() error { _, e := sparse.Conv(badEntry, x, w, b, ok); return e }(), sparse.ErrShape},
		{"x rows", func() error { _, e := sparse.Conv(m, sparse.NewMatrix[float32](m.NIn+1, p.ci), w, b, ok); return e }(), sparse.ErrShape},
		{"weight cols", func() error { _, e := sparse.Conv(m, x, sparse.NewMatrix[float32](p.co, V*p.ci+1), b, ok); return e }(), sparse.ErrShape},
		{"bias shape", func() error { _, e := sparse.Conv(m, x, w, sparse.NewMatrix[float32](1, p.co+1), ok); return e }(), sparse.ErrShape},
		{"bias rows", func() error { _, e := sparse.Conv(m, x, w, sparse.NewMatrix[float32](2, p.co), ok); return e }(), sparse.ErrShape},
		{"data length", func() error {
			_, e := sparse.Conv(m, sparse.Matrix{Rows: m.NIn, Cols: p.ci, Data: []float32{1}}, w, b, ok)
			return e
		}(), sparse.ErrShape},
		{"weight dtype", func() error { _, e := sparse.Conv(m, x, w64, b, ok); return e }(), sparse.ErrDType},
		{"bias dtype", func() error { _, e := sparse.Conv(m, x, w, matrixOf[float64](t, 1, p.co, p.b), ok); return e }(), sparse.ErrDType},
		{"int32 features", func() error { _, e := sparse.Conv(m, xi, wi, sparse.Matrix{}, ok); return e }(), sparse.ErrDType},
		{"unsupported data", func() error {
			_, e := sparse.Conv(m, sparse.Matrix{Rows: 1, Cols: 1, Data: []int8{1}}, w, b, ok)
			return e
		}(), sparse.ErrDType},
		{"host and device data", func() error { _, e := sparse.Conv(m, x, devW, sparse.Matrix{}, ok); return e }(), sparse.ErrNoEngine},
		{"unknown algorithm", func() error { _, e := sparse.Conv(m, x, w, b, sparse.ConvOptions{Algorithm: 17}); return e }(), sparse.ErrAlgorithm},
		{"negative algorithm", func() error { _, e := sparse.ConvWeightGrad(m, x, dy, sparse.ConvOptions{Algorithm: -1}); return e }(), sparse.ErrAlgorithm},
		{"negative split", func() error { _, e := sparse.Conv(m, x, w, b, sparse.ConvOptions{SplitK: -2}); return e }(), sparse.ErrOptions},
		{"negative tile", func() error { _, e := sparse.ConvInputGrad(m, dy, w, sparse.ConvOptions{TileRows: -1}); return e }(), sparse.ErrOptions},
		{"split too large", func() error {
			_, e := sparse.Conv(m, x, w, b, sparse.ConvOptions{Algorithm: sparse.ImplicitSplitK, SplitK: 1 << 20})
			return e
		}(), sparse.ErrOptions},
		{"dgrad nil map", func() error { _, e := sparse.ConvInputGrad(nil, dy, w, ok); return e }(), sparse.ErrShape},
		{"dgrad dy rows", func() error {
			_, e := sparse.ConvInputGrad(m, sparse.NewMatrix[float32](m.NOut+2, p.co), w, ok)
			return e
		}(), sparse.ErrShape},
		{"dgrad weight rows", func() error {
			_, e := sparse.ConvInputGrad(m, dy, sparse.NewMatrix[float32](p.co+1, V*p.ci), ok)
			return e
		}(), sparse.ErrShape},
		{"dgrad weight cols", func() error {
			_, e := sparse.ConvInputGrad(m, dy, sparse.NewMatrix[float32](p.co, V*p.ci+1), ok)
			return e
		}(), sparse.ErrShape},
		{"dgrad dtype", func() error { _, e := sparse.ConvInputGrad(m, dy, w64, ok); return e }(), sparse.ErrDType},
		{"dgrad table", func() error { _, e := sparse.ConvInputGrad(badEntry, dy, w, ok); return e }(), sparse.ErrShape},
		{"wgrad nil map", func() error { _, e := sparse.ConvWeightGrad(nil, x, dy, ok); return e }(), sparse.ErrShape},
		{"wgrad x rows", func() error { _, e := sparse.ConvWeightGrad(m, sparse.NewMatrix[float32](1, p.ci), dy, ok); return e }(), sparse.ErrShape},
		{"wgrad dy rows", func() error { _, e := sparse.ConvWeightGrad(m, x, sparse.NewMatrix[float32](1, p.co), ok); return e }(), sparse.ErrShape},
		{"wgrad dtype", func() error {
			_, e := sparse.ConvWeightGrad(m, x, matrixOf[float64](t, m.NOut, p.co, p.dy), ok)
			return e
		}(), sparse.ErrDType},
		{"param grads nil map", func() error { _, _, e := sparse.ConvParamGrads(nil, x, dy, ok); return e }(), sparse.ErrShape},
		{"param grads dy rows", func() error {
			_, _, e := sparse.ConvParamGrads(m, x, sparse.NewMatrix[float32](1, p.co), ok)
			return e
		}(), sparse.ErrShape},
		{"param grads dtype", func() error {
			_, _, e := sparse.ConvParamGrads(m, x, matrixOf[float64](t, m.NOut, p.co, p.dy), ok)
			return e
		}(), sparse.ErrDType},
		{"param grads device", func() error {
			_, _, e := sparse.ConvParamGrads(m, sparse.Matrix{Rows: m.NIn, Cols: p.ci, Data: fakeStorage{m.NIn * p.ci}},
				sparse.Matrix{Rows: m.NOut, Cols: p.co, Data: fakeStorage{m.NOut * p.co}}, ok)
			return e
		}(), sparse.ErrNoEngine},
		{"bias grad int32", func() error { _, e := sparse.BiasGrad(sparse.NewMatrix[int32](2, 2)); return e }(), sparse.ErrDType},
		{"bias grad length", func() error { _, e := sparse.BiasGrad(sparse.Matrix{Rows: 2, Cols: 2, Data: []float64{1}}); return e }(), sparse.ErrShape},
		{"bias grad device", func() error { _, e := sparse.BiasGrad(dev); return e }(), sparse.ErrNoEngine},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			require.Error(t, tc.err)
			require.True(t, errors.Is(tc.err, tc.want), "got %v, want %v", tc.err, tc.want)
		})
	}
	// A ShapeError names the argument.
	_, err := sparse.Conv(m, x, sparse.NewMatrix[float32](p.co, 3), b, ok)
	var se *sparse.ShapeError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "weight", se.Arg)
}

// TestConvEmpty: N = 0 gives empty results; Ci = 0 gives the bias.
func TestConvEmpty(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 4, Z: 4}
	m, err := kmap.NewSubmanifold(nil, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	require.NoError(t, err)
	x := sparse.NewMatrix[float32](0, 4)
	w := sparse.NewMatrix[float32](6, 27*4)
	y, err := sparse.Conv(m, x, w, sparse.NewMatrix[float32](1, 6), sparse.ConvOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, y.Rows)
	require.Equal(t, 6, y.Cols)
	dx, err := sparse.ConvInputGrad(m, sparse.NewMatrix[float32](0, 6), w, sparse.ConvOptions{})
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 4}, [2]int{dx.Rows, dx.Cols})
	dw, err := sparse.ConvWeightGrad(m, x, sparse.NewMatrix[float32](0, 6), sparse.ConvOptions{})
	require.NoError(t, err)
	require.Equal(t, make([]float32, 6*27*4), dw.F32())
	db, err := sparse.BiasGrad(sparse.NewMatrix[float64](0, 3))
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0, 0}, db.F64())
	dw, db, err = sparse.ConvParamGrads(m, x, sparse.NewMatrix[float32](0, 6), sparse.ConvOptions{})
	require.NoError(t, err)
	require.Equal(t, make([]float32, 6*27*4), dw.F32())
	require.Equal(t, make([]float32, 6), db.F32())

	one, err := kmap.NewSubmanifold([]int32{0, 1, 1, 1}, ext, [3]int{1, 1, 1}, [3]int{1, 1, 1})
	require.NoError(t, err)
	bias, _ := sparse.MatrixOf(1, 2, []float64{3, 4})
	y, err = sparse.Conv(one, sparse.NewMatrix[float64](1, 0), sparse.NewMatrix[float64](2, 0), bias, sparse.ConvOptions{})
	require.NoError(t, err)
	require.Equal(t, []float64{3, 4}, y.F64())
}

// ExampleConv convolves two active voxels with a 3×3×3 submanifold kernel
// whose centre tap is 2 and whose tap towards +z is 1: each output doubles
// its own value and adds its +z neighbour.
func ExampleConv() {
	coords := []int32{0, 1, 1, 1, 0, 1, 1, 2}
	ext := sparse.Extent{Batch: 1, X: 3, Y: 3, Z: 3}
	m, _ := kmap.NewSubmanifold(coords, ext, [3]int{3, 3, 3}, [3]int{1, 1, 1})
	x, _ := sparse.MatrixOf(2, 1, []float32{10, 1})
	wd := make([]float32, 27) // [Co=1, 3, 3, 3, Ci=1]
	wd[13] = 2                // centre tap (1, 1, 1)
	wd[14] = 1                // tap (1, 1, 2): the neighbour at z+1
	w, _ := sparse.MatrixOf(1, 27, wd)
	y, err := sparse.Conv(m, x, w, sparse.Matrix{}, sparse.ConvOptions{})
	fmt.Println(y.F32(), err)
	// Output: [21 2] <nil>
}

func TestWeightGradDType(t *testing.T) {
	for _, tc := range []struct {
		dt     sparse.DType
		narrow bool
		want   sparse.DType
	}{
		{sparse.Float16, false, sparse.Float32},
		{sparse.BFloat16, false, sparse.Float32},
		{sparse.Float16, true, sparse.Float16},
		{sparse.BFloat16, true, sparse.BFloat16},
		{sparse.Float32, false, sparse.Float32},
		{sparse.Float32, true, sparse.Float32},
		{sparse.Float64, false, sparse.Float64},
		{sparse.Float64, true, sparse.Float64},
	} {
		require.Equal(t, tc.want, sparse.WeightGradDType(tc.dt, tc.narrow), "%v narrow=%v", tc.dt, tc.narrow)
	}
}

// ownedStorage is the buffer type of biasFailingEngine.
type ownedStorage struct{ n int }

func (ownedStorage) DType() sparse.DType { return sparse.Float32 }
func (o ownedStorage) Len() int          { return o.n }

// biasFailingEngine owns ownedStorage matrices, has no ParamGradEngine,
// returns a weight gradient and then fails the bias gradient; it records
// what it is asked to free. Methods the test does not reach come from the
// nil embedded Engine.
type biasFailingEngine struct {
	sparse.Engine
	freed []sparse.Matrix
}

func (*biasFailingEngine) Name() string { return "bias-failing" }
func (*biasFailingEngine) Owns(m sparse.Matrix) bool {
	_, ok := m.Data.(ownedStorage)
	return ok
}
func (*biasFailingEngine) ConvWeightGrad(m *kmap.Map, x, dy sparse.Matrix, _ sparse.ConvOptions) (sparse.Matrix, error) {
	return sparse.Matrix{Rows: dy.Cols, Cols: m.V() * x.Cols, Data: ownedStorage{dy.Cols * m.V() * x.Cols}}, nil
}
func (*biasFailingEngine) BiasGrad(sparse.Matrix) (sparse.Matrix, error) {
	return sparse.Matrix{}, errors.New("bias gradient failed")
}
func (e *biasFailingEngine) Free(ms ...sparse.Matrix) { e.freed = append(e.freed, ms...) }

// TestConvParamGradsFreesOnError checks that ConvParamGrads, run in two
// calls on an engine without ParamGradEngine, hands the weight gradient
// back to the engine (MatrixFreer) when the bias gradient fails.
func TestConvParamGradsFreesOnError(t *testing.T) {
	p := newConvProblem(t, 1)
	m := p.m
	e := &biasFailingEngine{}
	sparse.Register(e)
	x := sparse.Matrix{Rows: m.NIn, Cols: p.ci, Data: ownedStorage{m.NIn * p.ci}}
	dy := sparse.Matrix{Rows: m.NOut, Cols: p.co, Data: ownedStorage{m.NOut * p.co}}
	dw, db, err := sparse.ConvParamGrads(m, x, dy, sparse.ConvOptions{})
	require.ErrorContains(t, err, "bias gradient failed")
	require.True(t, dw.IsZero() && db.IsZero(), "no results with the error")
	require.Len(t, e.freed, 1)
	require.Equal(t, sparse.Matrix{Rows: p.co, Cols: m.V() * p.ci, Data: ownedStorage{p.co * m.V() * p.ci}}, e.freed[0])
}
