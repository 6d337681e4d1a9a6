package ops

import (
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestColumnsOpGradients checks the column slice and its adjoint (the
// padding), which gradient graphs of ConcatChannels contain, and whose
// gradients are each other, against finite differences.
func TestColumnsOpGradients(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for _, op := range []colsOp{
		{start: 1, cols: 2, total: 5, dt: tensor.Float64},
		{start: 1, cols: 2, total: 5, pad: true, dt: tensor.Float64},
		{start: 0, cols: 5, total: 5, dt: tensor.Float64},
	} {
		t.Run(op.String(), func(t *testing.T) {
			x := tensor.New(tensor.WithShape(4, op.in()), tensor.WithBacking(randSlice(rng, 4*op.in(), -1, 1)))
			w := tensor.New(tensor.WithShape(4, op.out()), tensor.WithBacking(randSlice(rng, 4*op.out(), -1, 1)))
			rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
				y, err := gorgonia.ApplyOp(op, in[0])
				if err != nil {
					return nil, err
				}
				return gorgonia.Sum(gorgonia.Must(gorgonia.HadamardProd(gorgonia.Must(gorgonia.Square(y)), in[1])))
			}, []*tensor.Dense{x, w}, grad.WithoutLispMachine())
			require.NoError(t, err, "%v", rep)
		})
	}
}

// TestReLUGradOpGradient checks the gradient of ReLU's backward op with
// respect to dy (it is linear in dy; x is a constant).
func TestReLUGradOpGradient(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	x := tensor.New(tensor.WithShape(3, 4), tensor.WithBacking(randSlice(rng, 12, -1, 1)))
	dy := tensor.New(tensor.WithShape(3, 4), tensor.WithBacking(randSlice(rng, 12, -1, 1)))
	rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		d, err := gorgonia.ApplyOp(reluGradOp{dims: 2, dt: tensor.Float64}, in[0], in[1])
		if err != nil {
			return nil, err
		}
		return gorgonia.Sum(gorgonia.Must(gorgonia.Square(d)))
	}, []*tensor.Dense{x, dy}, grad.WithConstants(0), grad.WithoutLispMachine())
	require.NoError(t, err, "%v", rep)
}
