package grad_test

import (
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestPoolGradOpsMatchSparse(t *testing.T) {
	const c = 3
	for mi, tm := range testMaps(t, 31) {
		for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
			m := tm.M
			rng := rand.New(rand.NewPCG(uint64(mi), 31))
			xv := randDense(rng, dt, m.NIn, c)
			dyv := randDense(rng, dt, m.NOut, c)
			g := gorgonia.NewGraph()
			x, dy := input(g, "x", xv), input(g, "dy", dyv)
			dmax, err := grad.MaxPoolGrad(x, dy, m)
			require.NoError(t, err)
			davg, err := grad.AvgPoolGrad(dy, m)
			require.NoError(t, err)
			require.Equal(t, tensor.Shape{m.NIn, c}, dmax.Shape())
			require.Equal(t, tensor.Shape{m.NIn, c}, davg.Shape())
			vm := gorgonia.NewTapeMachine(g)
			require.NoError(t, vm.RunAll())
			vm.Close()

			_, argmax, err := sparse.Pool(m, mat(xv, m.NIn, c), sparse.MaxPool)
			require.NoError(t, err)
			wantMax, err := sparse.PoolGrad(m, mat(dyv, m.NOut, c), argmax, sparse.MaxPool)
			require.NoError(t, err)
			wantAvg, err := sparse.PoolGrad(m, mat(dyv, m.NOut, c), sparse.Matrix{}, sparse.AvgPool)
			require.NoError(t, err)
			require.Equal(t, wantMax.Data, dmax.Value().Data(), tm.Name)
			require.Equal(t, wantAvg.Data, davg.Value().Data(), tm.Name)
		}
	}
}

// TestPoolDoubleBackward checks the gradients of the pooling backward ops
// (second order) through both machines.
func TestPoolDoubleBackward(t *testing.T) {
	const c = 2
	for mi, tm := range testMaps(t, 32) {
		m := tm.M
		rng := rand.New(rand.NewPCG(uint64(mi), 32))
		xv := randDense(rng, tensor.Float64, m.NIn, c)
		dyv := randDense(rng, tensor.Float64, m.NOut, c)
		t.Run(tm.Name+"/max", func(t *testing.T) {
			// x is a constant: the result is piecewise constant in x.
			_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
				dx, err := grad.MaxPoolGrad(in[0], in[1], m)
				if err != nil {
					return nil, err
				}
				// A second level: the pullback of MaxPoolGrad is an
				// argmax gather, whose pullback is MaxPoolGrad again.
				return sumSquares(dx)
			}, []*tensor.Dense{xv, dyv}, grad.WithConstants(0))
			require.NoError(t, err)
		})
		t.Run(tm.Name+"/avg", func(t *testing.T) {
			_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
				dx, err := grad.AvgPoolGrad(in[0], m)
				if err != nil {
					return nil, err
				}
				return sumSquares(dx)
			}, []*tensor.Dense{dyv})
			require.NoError(t, err)
		})
	}
}

func TestPoolGradErrors(t *testing.T) {
	m := testMaps(t, 33)[1].M
	rng := rand.New(rand.NewPCG(3, 3))
	g := gorgonia.NewGraph()
	x := input(g, "x", randDense(rng, tensor.Float64, m.NIn, 2))
	dy := input(g, "dy", randDense(rng, tensor.Float64, m.NOut, 2))
	dyC := input(g, "dyc", randDense(rng, tensor.Float64, m.NOut, 3))
	dy32 := input(g, "dy32", randDense(rng, tensor.Float32, m.NOut, 2))
	_, err := grad.MaxPoolGrad(x, dyC, m)
	require.ErrorIs(t, err, sparse.ErrShape)
	require.Contains(t, err.Error(), "dy has shape")
	_, err = grad.MaxPoolGrad(x, dy32, m)
	require.ErrorIs(t, err, sparse.ErrDType)
	_, err = grad.AvgPoolGrad(x, m)
	require.ErrorIs(t, err, sparse.ErrShape)
	_, err = grad.AvgPoolGrad(dy, nil)
	require.ErrorIs(t, err, grad.ErrNilInput)
	_, err = grad.MaxPoolGrad(x, dy, m)
	require.NoError(t, err)
}
