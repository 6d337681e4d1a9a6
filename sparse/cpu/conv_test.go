package cpu

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
)

func cube(n int) [3]int { return [3]int{n, n, n} }

func ext(b, x, y, z int) grid.Extent { return grid.Extent{Batch: b, X: x, Y: y, Z: z} }

func geo(k, s, p, d [3]int) grid.Conv {
	return grid.Conv{Kernel: k, Stride: s, Padding: p, Dilation: d}
}

func sub(k, d [3]int) grid.Conv { return grid.Submanifold(k, d) }

// oracleCases sweeps kernel sizes 1–5 (odd for submanifold), strides 1–3,
// paddings 0–2, dilations 1–3, batches 1–3 and mixed per-axis geometry.
// Each case lists the (ci, co) channel pairs it is run with.
var oracleCases = []struct {
	spec     sceneSpec
	channels [][2]int
}{
	// Submanifold.
	{sceneSpec{kmap.Submanifold, ext(2, 6, 5, 7), 0.3, sub(cube(3), cube(1))}, [][2]int{{3, 13}, {13, 3}, {1, 1}}},
	{sceneSpec{kmap.Submanifold, ext(1, 4, 4, 4), 0.5, sub(cube(1), cube(1))}, [][2]int{{96, 13}, {3, 1}}},
	{sceneSpec{kmap.Submanifold, ext(2, 7, 6, 5), 0.25, sub(cube(5), cube(1))}, [][2]int{{3, 3}, {1, 13}}},
	{sceneSpec{kmap.Submanifold, ext(1, 8, 8, 8), 0.15, sub(cube(3), cube(2))}, [][2]int{{13, 96}}},
	{sceneSpec{kmap.Submanifold, ext(3, 6, 7, 8), 0.25, sub([3]int{3, 1, 5}, [3]int{1, 2, 3})}, [][2]int{{3, 13}}},
	{sceneSpec{kmap.Submanifold, ext(1, 9, 9, 9), 0.1, sub(cube(3), cube(3))}, [][2]int{{13, 13}, {96, 3}}},
	{sceneSpec{kmap.Submanifold, ext(2, 5, 5, 5), 0.9, sub(cube(3), cube(1))}, [][2]int{{13, 3}}},
	// Strided (generative) convolution.
	{sceneSpec{kmap.Strided, ext(2, 8, 8, 8), 0.2, geo(cube(2), cube(2), cube(0), cube(1))}, [][2]int{{13, 3}, {1, 96}}},
	{sceneSpec{kmap.Strided, ext(1, 7, 8, 9), 0.25, geo(cube(3), cube(2), cube(1), cube(1))}, [][2]int{{3, 13}}},
	{sceneSpec{kmap.Strided, ext(2, 6, 6, 6), 0.3, geo(cube(3), cube(1), cube(0), cube(1))}, [][2]int{{13, 13}}},
	{sceneSpec{kmap.Strided, ext(1, 8, 7, 9), 0.3, geo(cube(3), cube(3), cube(2), cube(1))}, [][2]int{{3, 3}}},
	{sceneSpec{kmap.Strided, ext(2, 9, 8, 7), 0.2, geo(cube(4), cube(2), cube(1), cube(1))}, [][2]int{{13, 1}}},
	{sceneSpec{kmap.Strided, ext(1, 10, 9, 9), 0.15, geo(cube(5), cube(3), cube(2), cube(1))}, [][2]int{{3, 13}}},
	{sceneSpec{kmap.Strided, ext(1, 9, 9, 9), 0.2, geo(cube(3), cube(1), cube(2), cube(3))}, [][2]int{{1, 3}}},
	{sceneSpec{kmap.Strided, ext(3, 8, 8, 8), 0.2, geo(cube(2), cube(2), cube(0), cube(2))}, [][2]int{{3, 3}}},
	{sceneSpec{kmap.Strided, ext(2, 7, 9, 8), 0.25, geo([3]int{2, 3, 1}, [3]int{1, 2, 3}, [3]int{0, 1, 0}, [3]int{1, 1, 2})}, [][2]int{{13, 3}}},
	{sceneSpec{kmap.Strided, ext(1, 6, 6, 6), 0.4, geo(cube(1), cube(2), cube(0), cube(1))}, [][2]int{{96, 96}}},
	// Transposed convolution.
	{sceneSpec{kmap.Transposed, ext(2, 4, 4, 4), 0.3, geo(cube(2), cube(2), cube(0), cube(1))}, [][2]int{{13, 3}, {1, 1}}},
	{sceneSpec{kmap.Transposed, ext(1, 4, 5, 4), 0.3, geo(cube(3), cube(2), cube(1), cube(1))}, [][2]int{{3, 13}}},
	{sceneSpec{kmap.Transposed, ext(2, 5, 5, 5), 0.3, geo(cube(3), cube(1), cube(1), cube(1))}, [][2]int{{13, 13}}},
	{sceneSpec{kmap.Transposed, ext(1, 4, 4, 5), 0.4, geo(cube(4), cube(3), cube(2), cube(1))}, [][2]int{{3, 1}}},
	{sceneSpec{kmap.Transposed, ext(3, 4, 4, 4), 0.3, geo(cube(3), cube(2), cube(0), cube(2))}, [][2]int{{3, 3}}},
	{sceneSpec{kmap.Transposed, ext(1, 4, 4, 4), 0.3, geo(cube(5), cube(1), cube(2), cube(1))}, [][2]int{{1, 13}}},
	{sceneSpec{kmap.Transposed, ext(2, 4, 5, 3), 0.4, geo([3]int{2, 3, 1}, [3]int{3, 2, 1}, [3]int{1, 0, 0}, [3]int{1, 3, 1})}, [][2]int{{13, 3}}},
	{sceneSpec{kmap.Transposed, ext(1, 3, 3, 3), 0.5, geo(cube(1), cube(2), cube(0), cube(1))}, [][2]int{{96, 13}}},
	// Inverse of a strided convolution (the decoder half of a UNet).
	{sceneSpec{kmap.Inverse, ext(2, 8, 8, 8), 0.2, geo(cube(2), cube(2), cube(0), cube(1))}, [][2]int{{3, 13}, {96, 1}}},
	{sceneSpec{kmap.Inverse, ext(1, 7, 8, 9), 0.25, geo(cube(3), cube(2), cube(1), cube(1))}, [][2]int{{13, 3}}},
	{sceneSpec{kmap.Inverse, ext(2, 9, 8, 7), 0.2, geo(cube(4), cube(3), cube(2), cube(1))}, [][2]int{{3, 3}}},
	{sceneSpec{kmap.Inverse, ext(1, 9, 9, 9), 0.2, geo(cube(3), cube(1), cube(1), cube(3))}, [][2]int{{1, 13}}},
	{sceneSpec{kmap.Inverse, ext(3, 7, 9, 8), 0.25, geo([3]int{2, 3, 1}, [3]int{1, 2, 3}, [3]int{0, 1, 0}, [3]int{1, 1, 2})}, [][2]int{{13, 13}}},
	// Empty inputs (N = 0) of every kind.
	{sceneSpec{kmap.Submanifold, ext(2, 4, 4, 4), 0, sub(cube(3), cube(1))}, [][2]int{{3, 13}}},
	{sceneSpec{kmap.Strided, ext(1, 4, 4, 4), 0, geo(cube(2), cube(2), cube(0), cube(1))}, [][2]int{{3, 13}}},
	{sceneSpec{kmap.Transposed, ext(1, 4, 4, 4), 0, geo(cube(2), cube(2), cube(0), cube(1))}, [][2]int{{3, 13}}},
	{sceneSpec{kmap.Inverse, ext(1, 4, 4, 4), 0, geo(cube(2), cube(2), cube(0), cube(1))}, [][2]int{{3, 13}}},
}

func TestConvAgainstOracle(t *testing.T) {
	for i, tc := range oracleCases {
		t.Run(tc.spec.String(), func(t *testing.T) {
			sc := buildScene(t, tc.spec, uint64(i))
			for j, ch := range tc.channels {
				seed := uint64(100*i + j)
				checkAll[float64](t, sc, newOracle[float64](sc, ch[0], ch[1], seed), allOptions())
				checkAll[float32](t, sc, newOracle[float32](sc, ch[0], ch[1], seed), allOptions())
			}
		})
	}
}

// TestConvSingleVoxel runs every kind on a grid with exactly one active
// site.
func TestConvSingleVoxel(t *testing.T) {
	one := []int32{1, 1, 2, 0}
	specs := []sceneSpec{
		{kmap.Submanifold, ext(2, 3, 3, 3), 0, sub(cube(3), cube(1))},
		{kmap.Strided, ext(2, 3, 3, 3), 0, geo(cube(2), cube(2), cube(1), cube(1))},
		{kmap.Transposed, ext(2, 3, 3, 3), 0, geo(cube(3), cube(2), cube(1), cube(1))},
		{kmap.Inverse, ext(2, 3, 3, 3), 0, geo(cube(3), cube(2), cube(1), cube(1))},
	}
	for i, spec := range specs {
		t.Run(spec.kind.String(), func(t *testing.T) {
			sc := buildSceneOn(t, spec, one)
			active := sc.m.NIn
			if spec.kind == kmap.Inverse {
				active = sc.m.NOut // the single site is the fine output
			}
			require.Equal(t, 1, active)
			checkAll[float64](t, sc, newOracle[float64](sc, 3, 13, uint64(i)), allOptions())
			checkAll[float32](t, sc, newOracle[float32](sc, 13, 3, uint64(i)), allOptions())
		})
	}
}

// TestConvNoBias checks that a nil bias means zero.
func TestConvNoBias(t *testing.T) {
	sc := buildScene(t, sceneSpec{kmap.Submanifold, ext(1, 5, 5, 5), 0.4, sub(cube(3), cube(1))}, 1)
	o := newOracle[float64](sc, 3, 5, 1)
	for i := range o.y {
		o.y[i] -= o.bias[i%o.co]
	}
	o.noBias = true
	checkAll[float64](t, sc, o, allOptions())
}

// TestConvZeroChannels covers ci = 0 (output = bias) and co = 0 (empty
// output).
func TestConvZeroChannels(t *testing.T) {
	sc := buildScene(t, sceneSpec{kmap.Strided, ext(1, 5, 5, 5), 0.4, geo(cube(2), cube(2), cube(0), cube(1))}, 2)
	for _, ch := range [][2]int{{0, 3}, {3, 0}} {
		checkAll[float64](t, sc, newOracle[float64](sc, ch[0], ch[1], 3), allOptions())
	}
}

// TestConvLarger runs a few bigger problems (many tiles, several
// goroutines, split-K with many chunks) against the oracle.
func TestConvLarger(t *testing.T) {
	if testing.Short() {
		t.Skip("larger oracle sweep in -short mode")
	}
	cases := []struct {
		spec   sceneSpec
		ci, co int
	}{
		{sceneSpec{kmap.Submanifold, ext(2, 14, 14, 14), 0.15, sub(cube(3), cube(1))}, 13, 40},
		{sceneSpec{kmap.Strided, ext(2, 14, 14, 14), 0.15, geo(cube(2), cube(2), cube(0), cube(1))}, 33, 17},
		{sceneSpec{kmap.Transposed, ext(2, 7, 7, 7), 0.3, geo(cube(2), cube(2), cube(0), cube(1))}, 17, 33},
	}
	for i, tc := range cases {
		t.Run(tc.spec.String(), func(t *testing.T) {
			sc := buildScene(t, tc.spec, uint64(i+50))
			checkAll[float64](t, sc, newOracle[float64](sc, tc.ci, tc.co, 9), allOptions())
			checkAll[float32](t, sc, newOracle[float32](sc, tc.ci, tc.co, 9), allOptions())
		})
	}
}

func TestConvErrors(t *testing.T) {
	sc := buildScene(t, sceneSpec{kmap.Submanifold, ext(1, 4, 4, 4), 0.5, sub(cube(3), cube(1))}, 3)
	m := sc.m
	n, V := m.NIn, m.V()
	x := make([]float32, n*2)
	w := make([]float32, 3*V*2)
	y := make([]float32, n*3)
	dy := make([]float32, n*3)
	ok := Options{}
	bad := func(err error, target error) {
		t.Helper()
		require.Error(t, err)
		require.True(t, errors.Is(err, target), "%v is not %v", err, target)
	}
	require.NoError(t, Forward(m, x, 2, w, 3, nil, y, ok))
	bad(Forward(nil, x, 2, w, 3, nil, y, ok), ErrMap)
	bad(Forward(m, x[:1], 2, w, 3, nil, y, ok), ErrShape)
	bad(Forward(m, x, 2, w[:5], 3, nil, y, ok), ErrShape)
	bad(Forward(m, x, 2, w, 3, make([]float32, 2), y, ok), ErrShape)
	bad(Forward(m, x, 2, w, 3, nil, y[:4], ok), ErrShape)
	bad(Forward(m, x, -2, w, 3, nil, y, ok), ErrShape)
	bad(Forward(m, x, 2, w, 3, nil, y, Options{Method: 99}), ErrOptions)
	bad(Forward(m, x, 2, w, 3, nil, y, Options{SplitK: -1}), ErrOptions)
	bad(Forward(m, x, 2, w, 3, nil, y, Options{SplitK: MaxSplitK + 1}), ErrOptions)
	bad(Forward(m, x, 2, w, 3, nil, y, Options{TileRows: -3}), ErrOptions)
	bad(InputGrad(m, dy, 3, w, 2, x[:3], ok), ErrShape)
	bad(InputGrad(m, dy[:2], 3, w, 2, x, ok), ErrShape)
	bad(InputGrad(nil, dy, 3, w, 2, x, ok), ErrMap)
	bad(InputGrad(m, dy, 3, w, 2, x, Options{Method: -1}), ErrOptions)
	bad(WeightGrad(m, x, 2, dy, 3, w[:1], ok), ErrShape)
	bad(WeightGrad(m, x[:1], 2, dy, 3, w, ok), ErrShape)
	bad(WeightGrad(m, x, 2, dy, 3, w, Options{TileRows: MaxTileRows + 1}), ErrOptions)
	bad(BiasGrad(dy, 3, make([]float32, 2)), ErrShape)
	bad(BiasGrad(dy[:4], 3, make([]float32, 3)), ErrShape)
	bad(BiasGrad(dy, -1, nil), ErrShape)

	// A table entry that is not −1 or an input row, or a table of the
	// wrong size, is reported instead of indexing out of range.
	broken := &kmap.Map{Kind: m.Kind, Conv: m.Conv, In: m.In, Out: m.Out, NIn: m.NIn, NOut: m.NOut, OutCoords: m.OutCoords}
	broken.Nbr = append([]int32(nil), m.Nbr...)
	broken.Nbr[3] = int32(n)
	bad(Forward(broken, x, 2, w, 3, nil, y, ok), ErrMap)
	bad(InputGrad(broken, dy, 3, w, 2, x, ok), ErrMap)
	bad(WeightGrad(broken, x, 2, dy, 3, w, ok), ErrMap)
	broken.Nbr[3] = -2
	bad(Forward(broken, x, 2, w, 3, nil, y, ok), ErrMap)
	short := &kmap.Map{Kind: m.Kind, Conv: m.Conv, In: m.In, Out: m.Out, NIn: m.NIn, NOut: m.NOut, OutCoords: m.OutCoords, Nbr: m.Nbr[:5]}
	bad(Forward(short, x, 2, w, 3, nil, y, ok), ErrMap)
}

func TestMethodNames(t *testing.T) {
	for _, m := range append([]Method{Auto}, Methods...) {
		require.NotContains(t, m.String(), "Method(")
	}
	require.Equal(t, "Method(42)", Method(42).String())
	require.True(t, MaskedSplitK.SplitK())
	require.False(t, Masked.SplitK())
	r := Options{}.Resolve(64, 64)
	require.NotEqual(t, Auto, r.Method)
	require.Positive(t, r.TileRows)
	require.Positive(t, r.SplitK)
	require.Equal(t, Options{Method: Implicit, TileRows: 3, SplitK: 2}, Options{Method: Implicit, TileRows: 3, SplitK: 2}.Resolve(1, 1))
	require.Equal(t, Masked, Options{}.Resolve(64, 64).Method)
	require.Equal(t, Explicit, Options{}.Resolve(3, 64).Method)
	_ = fmt.Sprint()
}

// TestConvNoInputs: a strided map with given output sites and no inputs
// gives y = bias, dx empty, dw = 0.
func TestConvNoInputs(t *testing.T) {
	e := ext(1, 4, 4, 4)
	m, err := kmap.NewStrided(nil, e, geo(cube(2), cube(2), cube(0), cube(1)), []int32{0, 0, 0, 0, 0, 1, 1, 0})
	require.NoError(t, err)
	require.Equal(t, 0, m.NIn)
	require.Equal(t, 2, m.NOut)
	for _, opt := range allOptions() {
		y := []float64{9, 9, 9, 9, 9, 9}
		require.NoError(t, Forward(m, nil, 2, make([]float64, 3*8*2), 3, []float64{1, 2, 3}, y, opt))
		require.Equal(t, []float64{1, 2, 3, 1, 2, 3}, y)
		require.NoError(t, InputGrad(m, []float64{1, 2, 3, 4, 5, 6}, 3, make([]float64, 3*8*2), 2, nil, opt))
		dw := make([]float64, 3*8*2)
		dw[5] = 7
		require.NoError(t, WeightGrad(m, nil, 2, []float64{1, 2, 3, 4, 5, 6}, 3, dw, opt))
		require.Equal(t, make([]float64, 3*8*2), dw)
	}
}
