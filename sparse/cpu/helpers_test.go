package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/reference"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
	"github.com/stretchr/testify/require"
)

// scene is one convolution problem: a kernel map and its dense-oracle
// description (input sites, output sites, geometry, kind).
type scene struct {
	name string
	m    *kmap.Map
	// The oracle's view: input coordinates and grid, output coordinates,
	// kernel, geometry, and for transposed kinds the output grid.
	inCoords  []int32
	inExt     grid.Extent
	outCoords []int32
	outExt    grid.Extent
	kernel    [3]int
	geom      reference.Geometry
	transpose bool
}

// sceneSpec describes a scene to build.
type sceneSpec struct {
	kind    kmap.Kind
	ext     grid.Extent // input grid (the fine grid for inverse)
	density float64
	conv    grid.Conv
}

func (s sceneSpec) String() string {
	c := s.conv
	return fmt.Sprintf("%v/B%d_%dx%dx%d/d%.2f/K%v_S%v_P%v_D%v", s.kind, s.ext.Batch, s.ext.X, s.ext.Y, s.ext.Z, s.density, c.Kernel, c.Stride, c.Padding, c.Dilation)
}

func toGeom(c grid.Conv) reference.Geometry {
	return reference.Geometry{Stride: c.Stride, Padding: c.Padding, Dilation: c.Dilation}
}

// buildScene builds the map of spec over random coordinates (seeded) and
// checks the map's output coordinates against the oracle's.
func buildScene(t testing.TB, spec sceneSpec, seed uint64) *scene {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	coords := synth.RandomScene(rng, spec.ext, spec.density)
	return buildSceneOn(t, spec, coords)
}

func buildSceneOn(t testing.TB, spec sceneSpec, coords []int32) *scene {
	t.Helper()
	sc := &scene{name: spec.String(), kernel: spec.conv.Kernel, geom: toGeom(spec.conv)}
	var err error
	switch spec.kind {
	case kmap.Submanifold:
		sc.m, err = kmap.NewSubmanifold(coords, spec.ext, spec.conv.Kernel, spec.conv.Dilation)
		require.NoError(t, err)
		sc.geom = reference.SubmanifoldGeometry(spec.conv.Kernel, spec.conv.Dilation)
		sc.inCoords, sc.inExt, sc.outCoords, sc.outExt = coords, spec.ext, coords, spec.ext
	case kmap.Strided:
		sc.m, err = kmap.NewStrided(coords, spec.ext, spec.conv, nil)
		require.NoError(t, err)
		sc.inCoords, sc.inExt = coords, spec.ext
		sc.outExt = reference.ConvExtent(spec.ext, spec.conv.Kernel, sc.geom)
		sc.outCoords = sc.m.OutCoords
		require.Equal(t, sc.outExt, sc.m.Out)
		require.Equal(t, nilIfEmpty(reference.ConvOutputs(coords, spec.ext, spec.conv.Kernel, sc.geom)), nilIfEmpty(sc.m.OutCoords), "strided output sites")
	case kmap.Transposed:
		sc.m, err = kmap.NewTransposed(coords, spec.ext, spec.conv)
		require.NoError(t, err)
		sc.transpose = true
		sc.inCoords, sc.inExt = coords, spec.ext
		sc.outExt = reference.TransposeExtent(spec.ext, spec.conv.Kernel, sc.geom)
		sc.outCoords = sc.m.OutCoords
		require.Equal(t, sc.outExt, sc.m.Out)
		require.Equal(t, nilIfEmpty(reference.TransposeOutputs(coords, spec.conv.Kernel, sc.geom, sc.outExt)), nilIfEmpty(sc.m.OutCoords), "transposed output sites")
	case kmap.Inverse:
		s, err := kmap.NewStrided(coords, spec.ext, spec.conv, nil)
		require.NoError(t, err)
		sc.m, err = kmap.NewInverse(s)
		require.NoError(t, err)
		sc.transpose = true
		sc.inCoords, sc.inExt = s.OutCoords, s.Out
		sc.outCoords, sc.outExt = coords, spec.ext
		require.Equal(t, nilIfEmpty(coords), nilIfEmpty(sc.m.OutCoords), "inverse output sites")
	}
	require.Equal(t, len(sc.inCoords)/4, sc.m.NIn)
	require.Equal(t, len(sc.outCoords)/4, sc.m.NOut)
	return sc
}

func nilIfEmpty(c []int32) []int32 {
	if len(c) == 0 {
		return nil
	}
	return c
}

// oracle holds a problem's float64 data and the dense oracle's answers.
type oracle struct {
	ci, co          int
	x, w, bias, dy  []float64 // inputs
	y, dx, dw, db   []float64 // oracle results
	noBias, skipFwd bool
}

// newOracle draws random data for sc with ci→co channels, rounded to T's
// precision, and evaluates the dense oracle on it.
func newOracle[T Float](sc *scene, ci, co int, seed uint64) *oracle {
	rng := rand.New(rand.NewPCG(seed, 7))
	V := sc.m.V()
	o := &oracle{ci: ci, co: co}
	o.x = roundTo[T](synth.Uniform[float64](rng, sc.m.NIn*ci))
	o.w = roundTo[T](synth.Weights[float64](rng, co, V, ci))
	o.bias = roundTo[T](synth.Uniform[float64](rng, co))
	o.dy = roundTo[T](synth.Uniform[float64](rng, sc.m.NOut*co))
	in := reference.Sparse{Coords: sc.inCoords, Feats: o.x, C: ci, Extent: sc.inExt}
	wt := reference.Weight{W: o.w, Co: co, Ci: ci, K: sc.kernel}
	if sc.transpose {
		o.y = reference.ConvTranspose3d(in, wt, o.bias, sc.geom, sc.outExt, sc.outCoords)
		o.dx, o.dw, o.db = reference.ConvTranspose3dGrad(in, wt, sc.geom, sc.outExt, sc.outCoords, o.dy)
	} else {
		o.y = reference.Conv3d(in, wt, o.bias, sc.geom, sc.outCoords)
		o.dx, o.dw, o.db = reference.Conv3dGrad(in, wt, sc.geom, sc.outCoords, o.dy)
	}
	return o
}

// roundTo rounds float64 values to T's precision.
func roundTo[T Float](v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(T(x))
	}
	return out
}

func conv[T Float](v []float64) []T {
	out := make([]T, len(v))
	for i, x := range v {
		out[i] = T(x)
	}
	return out
}

// tolerance returns the relative L2 tolerance for T.
func tolerance[T Float]() float64 {
	var z T
	if _, ok := any(z).(float32); ok {
		return 1e-5
	}
	return 1e-12
}

// requireClose checks got against want: relative L2 error within tol, and
// every element within tol·(‖want‖∞ + 1)·√len of its reference (which
// catches a single wrong element that the L2 norm would dilute).
func requireClose[T Float](t testing.TB, want []float64, got []T, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	var num, den, inf float64
	for i, w := range want {
		d := float64(got[i]) - w
		num += d * d
		den += w * w
		inf = max(inf, math.Abs(w))
	}
	require.False(t, math.IsNaN(num), "%s: NaN", what)
	rel := math.Sqrt(num) / max(math.Sqrt(den), 1e-300)
	if den == 0 {
		rel = math.Sqrt(num)
	}
	require.LessOrEqual(t, rel, tol, "%s: relative L2 error", what)
	lim := tol * (inf + 1) * math.Sqrt(float64(len(want))+1)
	for i, w := range want {
		require.InDelta(t, w, float64(got[i]), lim, "%s: element %d", what, i)
	}
}

// results runs every direction of method opt on problem o and returns the
// results.
type results[T Float] struct {
	y, dx, dw, db []T
}

func runAll[T Float](t testing.TB, sc *scene, o *oracle, opt Options) results[T] {
	t.Helper()
	m := sc.m
	var r results[T]
	r.y = make([]T, m.NOut*o.co)
	var bias []T
	if !o.noBias {
		bias = conv[T](o.bias)
	}
	require.NoError(t, Forward(m, conv[T](o.x), o.ci, conv[T](o.w), o.co, bias, r.y, opt))
	r.dx = make([]T, m.NIn*o.ci)
	require.NoError(t, InputGrad(m, conv[T](o.dy), o.co, conv[T](o.w), o.ci, r.dx, opt))
	r.dw = make([]T, o.co*m.V()*o.ci)
	require.NoError(t, WeightGrad(m, conv[T](o.x), o.ci, conv[T](o.dy), o.co, r.dw, opt))
	r.db = make([]T, o.co)
	require.NoError(t, BiasGrad(conv[T](o.dy), o.co, r.db))
	return r
}

// checkAll runs every method on o and compares each direction with the
// oracle.
func checkAll[T Float](t *testing.T, sc *scene, o *oracle, opts []Options) {
	tol := tolerance[T]()
	for _, opt := range opts {
		r := runAll[T](t, sc, o, opt)
		what := fmt.Sprintf("%s %v ci=%d co=%d %v", sc.name, opt, o.ci, o.co, typeName[T]())
		requireClose(t, o.y, r.y, tol, what+" forward")
		requireClose(t, o.dx, r.dx, tol, what+" dgrad")
		requireClose(t, o.dw, r.dw, tol, what+" wgrad")
		requireClose(t, o.db, r.db, tol, what+" bias grad")
	}
}

func typeName[T Float]() string {
	var z T
	return fmt.Sprintf("%T", z)
}

// allOptions lists every method with default and non-default tiles and
// splits.
func allOptions() []Options {
	var opts []Options
	for _, m := range Methods {
		opts = append(opts, Options{Method: m})
	}
	opts = append(opts,
		Options{Method: Auto},
		Options{Method: Explicit, TileRows: 5},
		Options{Method: Implicit, TileRows: 7},
		Options{Method: ImplicitSplitK, SplitK: 3, TileRows: 16},
		Options{Method: ImplicitSplitK, SplitK: 1},
		Options{Method: Masked, TileRows: 1},
		Options{Method: Masked, TileRows: 32},
		Options{Method: MaskedSplitK, SplitK: 7, TileRows: 9},
		Options{Method: MaskedSplitK, SplitK: 64},
	)
	return opts
}

// sameBits reports whether two slices are bit-identical.
func sameBits[T Float](a, b []T) bool {
	return slices.EqualFunc(a, b, func(x, y T) bool {
		switch v := any(x).(type) {
		case float32:
			return math.Float32bits(v) == math.Float32bits(any(y).(float32))
		default:
			return math.Float64bits(any(x).(float64)) == math.Float64bits(any(y).(float64))
		}
	})
}
