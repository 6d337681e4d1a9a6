package ops_test

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/flexgemm-go/flexgemm/grad"
	"github.com/flexgemm-go/flexgemm/ops"
	"github.com/flexgemm-go/flexgemm/sparse"
	"github.com/flexgemm-go/flexgemm/sparse/kmap"
	"github.com/stretchr/testify/require"
	"gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

var poolFuncs = []struct {
	name string
	mode sparse.PoolMode
	f    func(*gorgonia.Node, *kmap.Map) (*gorgonia.Node, error)
}{
	{"max", sparse.MaxPool, ops.MaxPool3d},
	{"avg", sparse.AvgPool, ops.AvgPool3d},
}

func TestPoolForwardMatchesSparse(t *testing.T) {
	const c = 3
	for mi, tm := range testMaps(t, 21) {
		for _, pf := range poolFuncs {
			for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
				t.Run(name(tm.Name, "/", pf.name, "/", dt), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(mi), 21))
					xv := randDense(rng, dt, tm.M.NIn, c)
					g := gorgonia.NewGraph()
					y, err := pf.f(input(g, "x", xv), tm.M)
					require.NoError(t, err)
					require.Equal(t, tensor.Shape{tm.M.NOut, c}, y.Shape())
					vm := gorgonia.NewTapeMachine(g)
					defer vm.Close()
					require.NoError(t, vm.RunAll())
					want, _, err := sparse.Pool(tm.M, sparse.Matrix{Rows: tm.M.NIn, Cols: c, Data: xv.Data()}, pf.mode)
					require.NoError(t, err)
					require.Equal(t, want.Data, y.Value().Data())
				})
			}
		}
	}
}

func TestPoolGradients(t *testing.T) {
	const c = 2
	for mi, tm := range testMaps(t, 22) {
		for _, pf := range poolFuncs {
			t.Run(tm.Name+"/"+pf.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(mi), 22))
				xv := randDense(rng, tensor.Float64, tm.M.NIn, c)
				rep, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
					y, err := pf.f(in[0], tm.M)
					if err != nil {
						return nil, err
					}
					return sumSquares(y)
				}, []*tensor.Dense{xv})
				require.NoError(t, err)
				require.True(t, rep.Inputs[0].Tape.Ran && rep.Inputs[0].Lisp.Ran)
			})
		}
	}
}

// TestPoolAfterConv differentiates a convolution followed by a max pool
// and an average pool (a UNet encoder step).
func TestPoolAfterConv(t *testing.T) {
	maps := testMaps(t, 23)
	subm, strided := maps[0].M, maps[1].M
	rng := rand.New(rand.NewPCG(23, 23))
	inputs := []*tensor.Dense{
		randDense(rng, tensor.Float64, subm.NIn, 2),
		randDense(rng, tensor.Float64, weightShape(subm, 3, 2)...),
	}
	_, err := grad.Check(func(g *gorgonia.ExprGraph, in gorgonia.Nodes) (*gorgonia.Node, error) {
		h, err := ops.SubMConv3d(in[0], in[1], subm, ops.WithAlgorithm(sparse.Explicit))
		if err != nil {
			return nil, err
		}
		p, err := ops.MaxPool3d(h, strided)
		if err != nil {
			return nil, err
		}
		q, err := ops.AvgPool3d(h, strided)
		if err != nil {
			return nil, err
		}
		s, err := gorgonia.Add(p, q)
		if err != nil {
			return nil, err
		}
		return sumSquares(s)
	}, inputs)
	require.NoError(t, err)
}

func TestPoolErrors(t *testing.T) {
	strided := testMaps(t, 24)[1].M
	g := gorgonia.NewGraph()
	rng := rand.New(rand.NewPCG(24, 24))
	xRows := input(g, "xrows", randDense(rng, tensor.Float64, strided.NIn+1, 2))
	x3 := input(g, "x3", randDense(rng, tensor.Float64, strided.NIn, 2, 1))
	xi := gorgonia.NewMatrix(g, tensor.Int32, gorgonia.WithShape(strided.NIn, 2), gorgonia.WithName("xi"))
	x := input(g, "x", randDense(rng, tensor.Float64, strided.NIn, 2))
	cases := []struct {
		name string
		run  func() (*gorgonia.Node, error)
		want error
		text string
	}{
		{"rows", func() (*gorgonia.Node, error) { return ops.MaxPool3d(xRows, strided) }, sparse.ErrShape, "m.NIn"},
		{"rank", func() (*gorgonia.Node, error) { return ops.AvgPool3d(x3, strided) }, sparse.ErrShape, "x has shape"},
		{"dtype", func() (*gorgonia.Node, error) { return ops.MaxPool3d(xi, strided) }, sparse.ErrDType, "int32"},
		{"nil map", func() (*gorgonia.Node, error) { return ops.AvgPool3d(x, nil) }, ops.ErrNilInput, "nil kernel map"},
		{"nil x", func() (*gorgonia.Node, error) { return ops.MaxPool3d(nil, strided) }, ops.ErrNilInput, "x is nil"},
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
	a, err := ops.MaxPool3d(x, strided)
	require.NoError(t, err)
	b, err := ops.AvgPool3d(x, strided)
	require.NoError(t, err)
	require.NotSame(t, a, b)
}
