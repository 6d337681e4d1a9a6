package grad

import (
	"testing"

	"github.com/flexgemm-go/flexgemm/sparse/grid"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func seq(n int, scale float64) []float64 {
	d := make([]float64, n)
	for i := range d {
		d[i] = scale * float64((i*7)%11-5)
	}
	return d
}

func squareSum(y *gorgonia.Node) (*gorgonia.Node, error) {
	sq, err := gorgonia.Square(y)
	if err != nil {
		return nil, err
	}
	return gorgonia.Sum(sq)
}

// TestClosureOps checks the gradients of the ops that only appear in
// second-order graphs (the bias-free forward convolution and the row
// broadcast), so that the set of backward ops is closed under
// differentiation to any order.
func TestClosureOps(t *testing.T) {
	ext := grid.Extent{Batch: 1, X: 4, Y: 3, Z: 3}
	coords := []int32{0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 1, 0, 0, 3, 2, 2, 0, 2, 2, 1, 0, 1, 1, 1}
	m, err := kmap.NewStrided(coords, ext, grid.Cube(2, 1, 0, 1), nil)
	require.NoError(t, err)
	x := tensor.New(tensor.WithShape(m.NIn, 2), tensor.WithBacking(seq(m.NIn*2, 0.1)))
	w := tensor.New(tensor.WithShape(3, 2, 2, 2, 2), tensor.WithBacking(seq(3*8*2, 0.07)))
	b := tensor.New(tensor.WithShape(3), tensor.WithBacking([]float64{0.3, -0.2, 0.5}))

	_, err = Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := gorgonia.ApplyOp(convForwardOp{convBase{m: m, dt: tensor.Float64}}, in[0], in[1])
		if err != nil {
			return nil, err
		}
		return squareSum(y)
	}, []*tensor.Dense{x, w})
	require.NoError(t, err)

	_, err = Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := gorgonia.ApplyOp(rowBroadcastOp{rows: 4, dt: tensor.Float64}, in[0])
		if err != nil {
			return nil, err
		}
		require.Equal(t, tensor.Shape{4, 3}, y.Shape())
		return squareSum(y)
	}, []*tensor.Dense{b})
	require.NoError(t, err)

	// Third order: the gradient of Σ (∂/∂x Σ conv²)² goes through
	// ConvInputGrad's pullback, which builds convForwardOp and
	// ConvWeightGrad nodes.
	_, err = Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		y, err := gorgonia.ApplyOp(convForwardOp{convBase{m: m, dt: tensor.Float64}}, in[0], in[1])
		if err != nil {
			return nil, err
		}
		dx, err := ConvInputGrad(y, in[1], m, convBase{}.opt)
		if err != nil {
			return nil, err
		}
		return squareSum(dx)
	}, []*tensor.Dense{x, w})
	require.NoError(t, err)
}
