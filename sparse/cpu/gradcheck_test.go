package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/flexgemm-go/flexgemm/sparse/synth"
	"github.com/stretchr/testify/require"
)

// TestFiniteDifferences checks InputGrad, WeightGrad and BiasGrad against
// central differences of L = Σ Forward(x, w, b) ⊙ r in float64, for every
// kind of map and every method.
func TestFiniteDifferences(t *testing.T) {
	specs := []sceneSpec{
		{kmap.Submanifold, ext(2, 4, 4, 3), 0.5, sub([3]int{3, 3, 1}, [3]int{1, 1, 1})},
		{kmap.Strided, ext(1, 5, 4, 5), 0.4, geo([3]int{2, 3, 2}, [3]int{2, 1, 2}, [3]int{0, 1, 1}, [3]int{1, 1, 1})},
		{kmap.Transposed, ext(1, 3, 3, 2), 0.5, geo([3]int{2, 2, 3}, [3]int{2, 1, 1}, [3]int{0, 1, 1}, [3]int{1, 1, 1})},
		{kmap.Inverse, ext(2, 4, 4, 4), 0.3, geo(cube(2), cube(2), cube(0), cube(1))},
	}
	const ci, co = 2, 3
	for i, spec := range specs {
		sc := buildScene(t, spec, uint64(i+40))
		m := sc.m
		require.NotZero(t, m.NIn)
		require.NotZero(t, m.NOut)
		rng := rand.New(rand.NewPCG(uint64(i), 5))
		x := synth.Uniform[float64](rng, m.NIn*ci)
		w := synth.Uniform[float64](rng, co*m.V()*ci)
		b := synth.Uniform[float64](rng, co)
		r := synth.Uniform[float64](rng, m.NOut*co)
		for _, method := range Methods {
			opt := Options{Method: method, TileRows: 4, SplitK: 3}
			t.Run(fmt.Sprintf("%v/%v", spec.kind, method), func(t *testing.T) {
				y := make([]float64, m.NOut*co)
				loss := func() float64 {
					require.NoError(t, Forward(m, x, ci, w, co, b, y, opt))
					s := 0.0
					for j := range y {
						s += y[j] * r[j]
					}
					return s
				}
				dx := make([]float64, m.NIn*ci)
				require.NoError(t, InputGrad(m, r, co, w, ci, dx, opt))
				dw := make([]float64, len(w))
				require.NoError(t, WeightGrad(m, x, ci, r, co, dw, opt))
				db := make([]float64, co)
				require.NoError(t, BiasGrad(r, co, db))
				fdCheck(t, "dx", x, dx, loss)
				fdCheck(t, "dw", w, dw, loss)
				fdCheck(t, "db", b, db, loss)
			})
		}
	}
}

// fdCheck compares grad with central differences of f at p (perturbed in
// place and restored). The loss is linear in each parameter, so the
// difference quotient is exact up to rounding.
func fdCheck(t *testing.T, what string, p, grad []float64, f func() float64) {
	t.Helper()
	const h = 1e-3
	require.Len(t, grad, len(p))
	for i := range p {
		old := p[i]
		p[i] = old + h
		fp := f()
		p[i] = old - h
		fm := f()
		p[i] = old
		fd := (fp - fm) / (2 * h)
		require.InDelta(t, fd, grad[i], 1e-9*(1+math.Abs(fd)), "%s[%d]", what, i)
	}
}

// TestDeterminism runs every method under GOMAXPROCS 1, 2 and 7 and
// requires bit-identical results in every direction.
func TestDeterminism(t *testing.T) {
	coords, e := synth.SphereShell(16, 2)
	m, err := kmap.NewSubmanifold(coords, e, cube(3), cube(1))
	require.NoError(t, err)
	sc := &scene{name: "shell16", m: m}
	s, err := kmap.NewStrided(coords, e, geo(cube(2), cube(2), cube(0), cube(1)), nil)
	require.NoError(t, err)
	inv, err := kmap.NewInverse(s)
	require.NoError(t, err)
	scenes := []*scene{sc, {name: "strided", m: s}, {name: "inverse", m: inv}}
	opts := append(allOptions(), Options{Method: Masked, TileRows: 16}, Options{Method: ImplicitSplitK, TileRows: 16, SplitK: 5})
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, sc := range scenes {
		o := randomData(sc.m, 13, 20, 1)
		for _, opt := range opts {
			t.Run(fmt.Sprintf("%s/%+v", sc.name, opt), func(t *testing.T) {
				var base32 results[float32]
				var base64 results[float64]
				for j, procs := range []int{1, 2, 7} {
					runtime.GOMAXPROCS(procs)
					r32 := runAll[float32](t, sc, o, opt)
					r64 := runAll[float64](t, sc, o, opt)
					if j == 0 {
						base32, base64 = r32, r64
						continue
					}
					for _, pair := range [][2][]float32{{base32.y, r32.y}, {base32.dx, r32.dx}, {base32.dw, r32.dw}, {base32.db, r32.db}} {
						require.True(t, sameBits(pair[0], pair[1]), "float32 differs with GOMAXPROCS=%d", procs)
					}
					for _, pair := range [][2][]float64{{base64.y, r64.y}, {base64.dx, r64.dx}, {base64.dw, r64.dw}, {base64.db, r64.db}} {
						require.True(t, sameBits(pair[0], pair[1]), "float64 differs with GOMAXPROCS=%d", procs)
					}
				}
			})
		}
	}
}

// randomData returns random problem data for m without an oracle.
func randomData(m *kmap.Map, ci, co int, seed uint64) *oracle {
	rng := rand.New(rand.NewPCG(seed, 3))
	return &oracle{
		ci: ci, co: co,
		x:    roundTo[float32](synth.Uniform[float64](rng, m.NIn*ci)),
		w:    roundTo[float32](synth.Weights[float64](rng, co, m.V(), ci)),
		bias: roundTo[float32](synth.Uniform[float64](rng, co)),
		dy:   roundTo[float32](synth.Uniform[float64](rng, m.NOut*co)),
	}
}

// TestWeightGradLargeTap covers taps with more than wgradMaxPairs pairs,
// which the non-split methods cut into chunks: a 1×1×1 map over more than
// 2·wgradMaxPairs sites, against a float64 loop, and bit-identical for
// GOMAXPROCS 1 and 2.
func TestWeightGradLargeTap(t *testing.T) {
	if testing.Short() {
		t.Skip("large map in -short mode")
	}
	e := ext(1, 48, 48, 48)
	coords := synth.RandomScene(rand.New(rand.NewPCG(1, 1)), e, 0.7)
	m, err := kmap.NewSubmanifold(coords, e, cube(1), cube(1))
	require.NoError(t, err)
	require.Greater(t, m.NIn, 2*wgradMaxPairs)
	const ci, co = 3, 5
	rng := rand.New(rand.NewPCG(2, 2))
	x := synth.Uniform[float64](rng, m.NIn*ci)
	dy := synth.Uniform[float64](rng, m.NOut*co)
	want := make([]float64, co*ci)
	for r := range m.NIn {
		for c := range co {
			for k := range ci {
				want[c*ci+k] += dy[r*co+c] * x[r*ci+k]
			}
		}
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, method := range Methods {
		var first []float64
		for _, procs := range []int{1, 2} {
			runtime.GOMAXPROCS(procs)
			dw := make([]float64, co*ci)
			require.NoError(t, WeightGrad(m, x, ci, dy, co, dw, Options{Method: method}))
			requireClose(t, want, dw, 1e-12, method.String())
			if first == nil {
				first = dw
			} else {
				require.True(t, sameBits(first, dw), "%v differs between GOMAXPROCS 1 and 2", method)
			}
		}
	}
}
