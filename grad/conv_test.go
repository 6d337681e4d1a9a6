package grad_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func weightShape(m *kmap.Map, co, ci int) []int {
	k := m.Conv.Kernel
	return []int{co, k[0], k[1], k[2], ci}
}

func mat(d *tensor.Dense, rows, cols int) sparse.Matrix {
	return sparse.Matrix{Rows: rows, Cols: cols, Data: d.Data()}
}

// TestBackwardOpsMatchSparse runs the three backward nodes and compares
// them with the sparse package, for every map kind, dtype and algorithm.
func TestBackwardOpsMatchSparse(t *testing.T) {
	const ci, co = 3, 2
	for mi, tm := range testMaps(t, 11) {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			algo := sparse.Algorithms[mi%len(sparse.Algorithms)]
			t.Run(name(tm.Name, "/", dt, "/", algo), func(t *testing.T) {
				m := tm.M
				opt := sparse.ConvOptions{Algorithm: algo, SplitK: 2, TileRows: 4}
				rng := rand.New(rand.NewPCG(uint64(mi), 2))
				xv := randDense(rng, dt, m.NIn, ci)
				wv := randDense(rng, dt, weightShape(m, co, ci)...)
				dyv := randDense(rng, dt, m.NOut, co)

				g := gorgonia.NewGraph()
				x, w, dy := input(g, "x", xv), input(g, "w", wv), input(g, "dy", dyv)
				dx, err := grad.ConvInputGrad(dy, w, m, opt)
				require.NoError(t, err)
				dw, err := grad.ConvWeightGrad(x, dy, m, opt)
				require.NoError(t, err)
				db, err := grad.BiasGrad(dy)
				require.NoError(t, err)
				require.Equal(t, tensor.Shape{m.NIn, ci}, dx.Shape())
				require.Equal(t, tensor.Shape(weightShape(m, co, ci)), dw.Shape())
				require.Equal(t, tensor.Shape{co}, db.Shape())
				vm := gorgonia.NewTapeMachine(g)
				defer vm.Close()
				require.NoError(t, vm.RunAll())

				wantDx, err := sparse.ConvInputGrad(m, mat(dyv, m.NOut, co), mat(wv, co, m.V()*ci), opt)
				require.NoError(t, err)
				wantDw, err := sparse.ConvWeightGrad(m, mat(xv, m.NIn, ci), mat(dyv, m.NOut, co), opt)
				require.NoError(t, err)
				wantDb, err := sparse.BiasGrad(mat(dyv, m.NOut, co))
				require.NoError(t, err)
				require.Equal(t, wantDx.Data, dx.Value().Data())
				require.Equal(t, wantDw.Data, dw.Value().Data())
				require.Equal(t, wantDb.Data, db.Value().Data())
			})
		}
	}
}

// TestAdjoint checks <Conv(x), dy> = <x, ConvInputGrad(dy)> and
// <Conv(x; w), dy> = <w, ConvWeightGrad(x, dy)> in float64.
func TestAdjoint(t *testing.T) {
	const ci, co = 2, 3
	for mi, tm := range testMaps(t, 12) {
		m := tm.M
		rng := rand.New(rand.NewPCG(uint64(mi), 9))
		xv := randDense(rng, tensor.Float64, m.NIn, ci)
		wv := randDense(rng, tensor.Float64, weightShape(m, co, ci)...)
		dyv := randDense(rng, tensor.Float64, m.NOut, co)
		y, err := sparse.Conv(m, mat(xv, m.NIn, ci), mat(wv, co, m.V()*ci), sparse.Matrix{}, sparse.ConvOptions{})
		require.NoError(t, err)

		g := gorgonia.NewGraph()
		x, w, dy := input(g, "x", xv), input(g, "w", wv), input(g, "dy", dyv)
		dx, err := grad.ConvInputGrad(dy, w, m, sparse.ConvOptions{})
		require.NoError(t, err)
		dw, err := grad.ConvWeightGrad(x, dy, m, sparse.ConvOptions{})
		require.NoError(t, err)
		vm := gorgonia.NewTapeMachine(g)
		require.NoError(t, vm.RunAll())
		vm.Close()

		lhs := dot(y.F64(), dyv.Data().([]float64))
		require.InDelta(t, lhs, dot(xv.Data().([]float64), dx.Value().Data().([]float64)), 1e-10, tm.Name)
		require.InDelta(t, lhs, dot(wv.Data().([]float64), dw.Value().Data().([]float64)), 1e-10, tm.Name)
	}
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// TestDoubleBackward checks the gradients of the backward ops themselves
// (second-order gradients) through both machines.
func TestDoubleBackward(t *testing.T) {
	const ci, co = 2, 2
	for mi, tm := range testMaps(t, 13) {
		m := tm.M
		opt := sparse.ConvOptions{Algorithm: sparse.Algorithms[mi%len(sparse.Algorithms)]}
		rng := rand.New(rand.NewPCG(uint64(mi), 4))
		xv := randDense(rng, tensor.Float64, m.NIn, ci)
		wv := randDense(rng, tensor.Float64, weightShape(m, co, ci)...)
		dyv := randDense(rng, tensor.Float64, m.NOut, co)
		t.Run(tm.Name+"/input", func(t *testing.T) {
			_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
				dx, err := grad.ConvInputGrad(in[0], in[1], m, opt)
				if err != nil {
					return nil, err
				}
				return sumSquares(dx)
			}, []*tensor.Dense{dyv, wv})
			require.NoError(t, err)
		})
		t.Run(tm.Name+"/weight", func(t *testing.T) {
			_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
				dw, err := grad.ConvWeightGrad(in[0], in[1], m, opt)
				if err != nil {
					return nil, err
				}
				return sumSquares(dw)
			}, []*tensor.Dense{xv, dyv})
			require.NoError(t, err)
		})
		t.Run(tm.Name+"/bias", func(t *testing.T) {
			_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
				db, err := grad.BiasGrad(in[0])
				if err != nil {
					return nil, err
				}
				return sumSquares(db)
			}, []*tensor.Dense{dyv})
			require.NoError(t, err)
		})
	}
}

func TestBackwardOpErrors(t *testing.T) {
	maps := testMaps(t, 14)
	m := maps[0].M
	rng := rand.New(rand.NewPCG(3, 3))
	g := gorgonia.NewGraph()
	x := input(g, "x", randDense(rng, tensor.Float64, m.NIn, 2))
	dy := input(g, "dy", randDense(rng, tensor.Float64, m.NOut, 4))
	dy32 := input(g, "dy32", randDense(rng, tensor.Float32, m.NOut, 4))
	dyRows := input(g, "dyrows", randDense(rng, tensor.Float64, m.NOut+2, 4))
	w := input(g, "w", randDense(rng, tensor.Float64, 4, 3, 3, 3, 2))
	wK := input(g, "wk", randDense(rng, tensor.Float64, 4, 1, 3, 3, 2))
	wCo := input(g, "wco", randDense(rng, tensor.Float64, 5, 3, 3, 3, 2))
	vec := input(g, "vec", randDense(rng, tensor.Float64, 4))
	cases := []struct {
		name string
		run  func() (*gorgonia.Node, error)
		want error
		text string
	}{
		{"dtype", func() (*gorgonia.Node, error) { return grad.ConvInputGrad(dy32, w, m, sparse.ConvOptions{}) }, sparse.ErrDType, "weight has dtype float64 but dy is float32"},
		{"dy rows", func() (*gorgonia.Node, error) { return grad.ConvInputGrad(dyRows, w, m, sparse.ConvOptions{}) }, sparse.ErrShape, "m.NOut"},
		{"kernel", func() (*gorgonia.Node, error) { return grad.ConvInputGrad(dy, wK, m, sparse.ConvOptions{}) }, sparse.ErrShape, "kernel"},
		{"Co", func() (*gorgonia.Node, error) { return grad.ConvInputGrad(dy, wCo, m, sparse.ConvOptions{}) }, sparse.ErrShape, "dy has shape"},
		{"nil map", func() (*gorgonia.Node, error) { return grad.ConvInputGrad(dy, w, nil, sparse.ConvOptions{}) }, grad.ErrNilInput, "nil kernel map"},
		{"split-K", func() (*gorgonia.Node, error) {
			return grad.ConvWeightGrad(x, dy, m, sparse.ConvOptions{SplitK: -3})
		}, grad.ErrOption, "split-K -3"},
		{"weight x rows", func() (*gorgonia.Node, error) { return grad.ConvWeightGrad(dyRows, dy, m, sparse.ConvOptions{}) }, sparse.ErrShape, "x has shape"},
		{"bias rank", func() (*gorgonia.Node, error) { return grad.BiasGrad(vec) }, sparse.ErrShape, "[N, Co]"},
		{"bias nil", func() (*gorgonia.Node, error) { return grad.BiasGrad(nil) }, grad.ErrNilInput, "dy is nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := c.run()
			require.Error(t, err)
			require.Nil(t, n)
			require.True(t, errors.Is(err, c.want), "%v does not wrap %v", err, c.want)
			require.Contains(t, err.Error(), c.text)
		})
	}
}
